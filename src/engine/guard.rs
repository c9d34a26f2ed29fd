//! Making a killed process's death as visible over io_uring as over epoll.
//!
//! A process killed with SIGKILL runs no code of its own: its kernel closes its descriptors,
//! and each socket's end (FIN or RST) tells its peers it is gone. But a socket with an io_uring
//! request armed on it (every connection's receive, every listener's accept) is also held by
//! the ring, whose requests are cancelled only after the process is gone, by the ring's exit
//! work in a kernel worker; that worker's last reference to the socket is dropped through the
//! delayed `fput`, and deferred task work falls back to a delayed work item first. The socket
//! closes, and its peers learn of the death, 5–10 ms late (at 250 Hz; `tools/probes/
//! kill_visibility.rs`), and a restart on the same port finds it still bound.
//!
//! The guard is a small process that shares the node process's descriptor table
//! (`clone(CLONE_FILES)`, no shared memory) and sleeps until its parent dies
//! (`PR_SET_PDEATHSIG`). Sharing the table, it holds the sockets open past the parent's exit,
//! so it can then shut each of them down (`shutdown(2)` ends the connection whoever else holds
//! the socket: the FIN goes out at once, and a listener stops listening) and exit, which
//! closes what remains. The parent pays one process (a copy of its page tables, at start) and
//! nothing per message or per connection.
//!
//! Only the process's own sockets are shut down: whatever it inherited (a launcher's socket
//! leaked without close-on-exec, a test harness's connection) is the launcher's business, and
//! is left alone. The guard therefore starts before the process opens any socket of its own,
//! and remembers (device, inode) of every socket open at that moment.
//!
//! The guard runs only raw system calls: it is a clone of one thread of a multithreaded
//! process, whose other threads may have held the allocator's locks at the clone.

use std::io;

/// Bytes of the guard's stack (it calls nothing deep).
const STACK: usize = 64 * 1024;

/// Most inherited sockets the guard remembers (more are rare; past them, the guard shuts none
/// down rather than risk a launcher's).
const INHERITED_MAX: usize = 256;

/// What the guard needs, written before the clone and only read after it.
#[repr(C)]
struct Setup {
    parent: libc::pid_t,
    /// The sockets open when the guard started, as (device, inode): not the process's own.
    inherited: [(u64, u64); INHERITED_MAX],
    inherited_len: usize,
    /// More sockets were inherited than `inherited` holds.
    overflow: bool,
}

/// The (device, inode) of `fd` if it is a socket.
fn socket_id(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat writes the struct it is given; any fd number is a valid argument.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some((st.st_dev, st.st_ino))
}

/// Start the guard of this process's sockets. Call once, before the process opens a socket of
/// its own (those already open are taken for inherited ones and never shut down), and early
/// (the clone copies the page tables of the memory in use); every later socket is covered,
/// since the table is shared.
pub fn guard_sockets() -> io::Result<()> {
    let mut inherited = [(0u64, 0u64); INHERITED_MAX];
    let (mut inherited_len, mut overflow) = (0, false);
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let fd: i32 = match entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
            Some(fd) => fd,
            None => continue,
        };
        if let Some(id) = socket_id(fd) {
            match inherited.get_mut(inherited_len) {
                Some(slot) => {
                    *slot = id;
                    inherited_len += 1;
                }
                None => overflow = true,
            }
        }
    }
    // SAFETY: an anonymous private mapping, checked below; it is never unmapped (the guard
    // lives as long as the process).
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // The setup sits at the bottom of the guard's stack, below where the stack grows down to.
    let setup = stack.cast::<Setup>();
    // SAFETY: the mapping is writable and large enough; nothing else uses it yet.
    unsafe {
        setup.write(Setup {
            parent: libc::getpid(),
            inherited,
            inherited_len,
            overflow,
        })
    };
    // SAFETY: `stack + STACK` is the top of a mapping of STACK bytes, 16-aligned (page
    // aligned); `guard` runs only raw system calls and never returns into Rust code of the
    // parent; the argument points into memory the child owns a private copy of.
    let pid = unsafe {
        libc::clone(
            guard,
            stack.cast::<u8>().add(STACK).cast(),
            libc::CLONE_FILES,
            setup.cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The guard: wait for the parent's death, then shut every socket of the shared table down.
extern "C" fn guard(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Setup` written before the clone, in this process's private copy.
    let setup = unsafe { &*arg.cast::<Setup>() };
    let parent = setup.parent;
    // SAFETY: raw system calls with valid arguments (a signal set on the stack).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1 as libc::c_ulong);
        // The parent may have died before the death signal was asked for.
        while libc::getppid() == parent {
            libc::sigwaitinfo(&set, std::ptr::null_mut());
        }
        if !setup.overflow {
            shut_own_sockets(&setup.inherited[..setup.inherited_len]);
        }
        libc::_exit(0)
    }
}

/// Shut down every socket of this process's descriptor table but the `inherited` ones, listing
/// the table through `/proc/self/fd` with raw system calls.
///
/// # Safety
/// Only raw system calls; callable in the guard.
unsafe fn shut_own_sockets(inherited: &[(u64, u64)]) {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    let shut = |fd: i32| {
        if let Some(id) = socket_id(fd) {
            if !inherited.contains(&id) {
                // SAFETY: shutdown of a socket of the table; it ends the connection at once.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
        }
    };
    if dir < 0 {
        // No /proc: try every descriptor up to a generous bound.
        (0..65_536).for_each(shut);
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: the buffer is writable for its length.
        let n = unsafe {
            libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) as isize
        };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at < n as usize {
            // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name[].
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..at + reclen];
            let mut fd: i32 = 0;
            let mut digits = false;
            for &c in name.iter().take_while(|&&c| c != 0) {
                if !c.is_ascii_digit() {
                    digits = false;
                    break;
                }
                fd = fd.saturating_mul(10).saturating_add((c - b'0') as i32);
                digits = true;
            }
            if digits && fd != dir {
                shut(fd);
            }
            at += reclen.max(1);
        }
    }
    // SAFETY: `dir` is ours.
    unsafe { libc::close(dir) };
}
