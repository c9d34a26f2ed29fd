//! A child process as an unprivileged user (`nobody`), optionally with a locked-memory limit:
//! how a job runs under a batch system, where io_uring may be refused for reasons root never
//! meets (`kernel.io_uring_disabled = 1`, a low `RLIMIT_MEMLOCK`). Needs root to switch user.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// The user and group `nobody` has on Debian.
pub const NOBODY: u32 = 65534;

/// Whether this process may switch users (root).
pub fn can_switch_user() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Have `cmd`'s process run as `nobody`, with no supplementary groups and, if `memlock` is
/// set, that many bytes of `RLIMIT_MEMLOCK` (soft and hard). Needs [`can_switch_user`].
pub fn as_nobody(cmd: &mut Command, memlock: Option<u64>) -> &mut Command {
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
    // (setrlimit, setgroups, setgid, setuid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let fail = || Err(std::io::Error::last_os_error());
            if let Some(bytes) = memlock {
                let lim = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                    return fail();
                }
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return fail();
            }
            Ok(())
        })
    }
}
