//! Real seccomp filters, for io_uring refusals no healthy kernel makes on demand:
//! - [`refuse_io_uring`]: a child process whose `io_uring_setup(2)` fails with a given errno
//!   (EPERM is what Docker's default profile returns, ENOSYS what a kernel without io_uring
//!   does);
//! - [`EnterRefusals`]: this thread's `io_uring_enter(2)` calls handed to a supervisor that
//!   refuses some with the transient errors a loaded kernel returns (EAGAIN, EBUSY, EINTR).
//!
//! The kernel runs a filter on every system call, however it is made (glibc or a raw
//! `syscall`), exactly as in those environments.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// Offsets in the kernel's `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_eq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// A filter: on this architecture, system call `nr` gets `action`; everything else runs.
fn program(nr: libc::c_long, action: u32) -> Vec<libc::sock_filter> {
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    vec![
        stmt(load, ARCH),
        jump_eq(AUDIT_ARCH, 0, 3), // another ABI: allow
        stmt(load, NR),
        jump_eq(nr as u32, 0, 1),
        stmt(ret, action),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Have `cmd`'s process refuse io_uring with `errno`, from before it runs its first
/// instruction. `no_new_privs` first, which lets an unprivileged process install a filter.
pub fn refuse_io_uring(cmd: &mut Command, errno: i32) -> &mut Command {
    let prog = program(
        libc::SYS_io_uring_setup,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    );
    // SAFETY: between fork and exec the closure makes two `prctl` calls (async-signal-safe)
    // and allocates nothing; `prog` was built before the fork and outlives the calls.
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Have every system call `nr` of the calling thread, and of the threads it starts from now
/// on, fail with `errno` (as a sandbox's profile refuses it). Other threads are not filtered.
pub fn refuse_in_this_thread(nr: libc::c_long, errno: i32) -> std::io::Result<()> {
    let prog = program(
        nr,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    );
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: prctl reads the program, which outlives the calls; both affect this thread only
    // (no SECCOMP_FILTER_FLAG_TSYNC).
    let ok = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            ) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Refusals of `io_uring_enter`: from [`EnterRefusals::install`] on, every `io_uring_enter` of
/// the calling thread, and of every thread it starts afterwards, waits for a supervisor
/// thread (a seccomp user notification). Of every `period` calls the supervisor refuses the
/// last `run` in a row (or, in a spell of [`EnterRefusals::refuse_all`], every one), each with
/// the next of `errnos`, and lets the others run as asked. Other threads are not filtered.
pub struct EnterRefusals {
    stop: Arc<AtomicBool>,
    /// Refuse every call, whatever the pattern ([`EnterRefusals::refuse_all`]).
    all: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    passed: Arc<AtomicU64>,
    supervisor: Option<JoinHandle<()>>,
}

impl EnterRefusals {
    /// Filter the calling thread (`no_new_privs` first, as for any unprivileged filter).
    pub fn install(period: u64, run: u64, errnos: &'static [i32]) -> std::io::Result<Self> {
        assert!(run < period, "some calls must go through");
        let prog = program(libc::SYS_io_uring_enter, libc::SECCOMP_RET_USER_NOTIF);
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr().cast_mut(),
        };
        // SAFETY: `prctl` and `seccomp` read `fprog` and `prog` during the calls only; a
        // non-negative result of `seccomp` with NEW_LISTENER is a new fd we own.
        let listener = unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd as i32)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let all = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let passed = Arc::new(AtomicU64::new(0));
        let (s, a, r, p) = (stop.clone(), all.clone(), refused.clone(), passed.clone());
        let supervisor =
            std::thread::spawn(move || supervise(listener, (period, run), errnos, s, a, r, p));
        Ok(Self {
            stop,
            all,
            refused,
            passed,
            supervisor: Some(supervisor),
        })
    }

    /// From now on refuse every call (`true`: a spell of a kernel that takes nothing), or
    /// go back to the pattern (`false`).
    pub fn refuse_all(&self, on: bool) {
        self.all.store(on, Ordering::Relaxed);
    }

    /// Calls refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Calls let through so far.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }
}

impl Drop for EnterRefusals {
    /// Stop supervising. Filtered threads still alive would then wait forever in their next
    /// `io_uring_enter`: drop this only after they ended.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.supervisor.take() {
            let _ = s.join();
        }
    }
}

/// Answer the filter's notifications until `stop`.
fn supervise(
    listener: OwnedFd,
    (period, run): (u64, u64),
    errnos: &[i32],
    stop: Arc<AtomicBool>,
    all: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    passed: Arc<AtomicU64>,
) {
    let fd = listener.as_raw_fd();
    let mut calls = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        if unsafe { libc::poll(&mut p, 1, 50) } != 1 || p.revents & libc::POLLIN == 0 {
            continue;
        }
        // SAFETY: all-zero is a valid `seccomp_notif`, which the kernel requires before it
        // fills one in; the ioctls read and write one struct of the right type each.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } != 0 {
            continue; // the caller was interrupted or is gone
        }
        calls += 1;
        let refuse = all.load(Ordering::Relaxed) || calls % period >= period - run;
        let resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error: if refuse {
                -errnos[refused.load(Ordering::Relaxed) as usize % errnos.len()]
            } else {
                0
            },
            flags: if refuse {
                0
            } else {
                libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
            },
        };
        // SAFETY: as above.
        if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) } == 0 {
            if refuse { &refused } else { &passed }.fetch_add(1, Ordering::Relaxed);
        }
    }
}
