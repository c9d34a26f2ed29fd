//! A reactor's own descriptor table ([`ReactorOptions::own_descriptors`]).
//!
//! The limit on open descriptors (`RLIMIT_NOFILE`) bounds each descriptor table, and a
//! process's threads share one. An in-process job's nodes hold both ends of every connection
//! and a listener each: 1024 BMG nodes need about 20 500 descriptors, past a hard limit that a
//! process without `CAP_SYS_RESOURCE` cannot raise (20 000 in the container weft's figures come
//! from). A reactor thread with a table of its own (`unshare(CLONE_FILES)`) counts only its
//! own nodes' descriptors against the limit: two reactors hold half each.
//!
//! The unshare copies the whole table, so the reactor then closes every descriptor it did not
//! take over (other reactors' listeners, the caller's files and pipes: a pipe's write end kept
//! open in a copy would keep its reader from ever seeing the end), and the caller closes its
//! copies of those it handed over (a killed node's listener must stop listening when its
//! reactor closes it). What the reactor opens later is in its table only, where no other
//! thread can use it: right for an engine whose sockets only their reactor touches. The socket
//! guard ([`super::guard`]) watches the process's table, not a reactor's own: node processes,
//! which it guards, host one node and never need this.
//!
//! [`ReactorOptions::own_descriptors`]: super::ReactorOptions::own_descriptors

use std::io;
use std::os::fd::RawFd;

/// Give the calling thread a descriptor table of its own, a copy of the process's, and close
/// in it every descriptor but `keep` and standard input, output and error.
pub fn take_own(keep: &[RawFd]) -> io::Result<()> {
    // SAFETY: unshare takes no pointers; it only affects the calling thread.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        // A sandbox may refuse unshare (Docker's default seccomp profile does, without
        // CAP_SYS_ADMIN): say which call, so the user knows what to allow.
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("unshare(CLONE_FILES) for a reactor's own descriptor table: {e}"),
        ));
    }
    let mut keep: Vec<u32> = keep
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .chain([0, 1, 2])
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from = 0u32;
    for k in keep {
        if k > from {
            close_range(from, k - 1)?;
        }
        from = k + 1;
    }
    close_range(from, u32::MAX)
}

/// Close descriptors `first..=last` of the calling thread's table.
fn close_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes no pointers; it closes descriptors of this thread's table,
    // which after the unshare no other thread uses.
    if unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOSYS) {
        return Err(e);
    }
    // Before Linux 5.9: close what the table lists in the range.
    let open: Vec<u32> = std::fs::read_dir("/proc/thread-self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| (first..=last).contains(fd))
        .collect();
    for fd in open {
        // SAFETY: as above; a descriptor already gone (the directory's own) fails harmlessly.
        unsafe { libc::close(fd as RawFd) };
    }
    Ok(())
}

/// Close, in the calling thread's table, the copies of descriptors a reactor took into a table
/// of its own ([`take_own`]).
pub fn close_handed(fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: the caller's objects for these descriptors moved to the reactor, so nothing
        // in this table uses the numbers any more.
        unsafe { libc::close(fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Whether `fd` is open in the calling thread's table.
    fn open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD reads a descriptor's flags; any number is a valid argument.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// The file `fd` names (device and inode), if it is open.
    fn file(fd: RawFd) -> Option<(u64, u64)> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a whole stat into `st` when it succeeds; any number is a valid
        // argument.
        if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: fstat succeeded, so it filled `st`.
        let st = unsafe { st.assume_init() };
        Some((st.st_dev, st.st_ino))
    }

    #[test]
    fn a_thread_keeps_what_it_took_and_the_caller_keeps_the_rest() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let left = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (t, l) = (taken.as_raw_fd(), left.as_raw_fd());
        let (seen_t, seen_l) = std::thread::spawn(move || {
            take_own(&[taken.as_raw_fd()]).unwrap();
            let seen = (open(taken.as_raw_fd()), open(l));
            drop(taken);
            seen
        })
        .join()
        .unwrap();
        assert!(seen_t, "the thread lost the descriptor it kept");
        assert!(
            !seen_l,
            "the thread's table still holds the caller's descriptor"
        );
        // The caller's copy of the taken one is still open until it closes it. Other tests
        // of this process open descriptors meanwhile and may be given its number at once:
        // closed means the number no longer names that socket.
        let before = file(t);
        assert!(before.is_some());
        close_handed(&[t]);
        assert_ne!(file(t), before, "the caller's copy is still open");
        assert!(open(left.as_raw_fd()));
    }
}
