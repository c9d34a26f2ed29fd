//! A real seccomp filter for a child process that makes `io_uring_setup(2)` fail with a given
//! errno: EPERM is what Docker's default profile returns, ENOSYS what a kernel without
//! io_uring does. The kernel runs the filter on every system call of the child, however it is
//! made (glibc or a raw `syscall`), exactly as in those environments.

use std::os::unix::process::CommandExt;
use std::process::Command;

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

/// The filter: on this architecture, `io_uring_setup` returns `-errno`; everything else runs.
fn program(errno: i32) -> Vec<libc::sock_filter> {
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    vec![
        stmt(load, ARCH),
        jump_eq(AUDIT_ARCH, 0, 3), // another ABI: allow
        stmt(load, NR),
        jump_eq(libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(
            ret,
            libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
        ),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Have `cmd`'s process refuse io_uring with `errno`, from before it runs its first
/// instruction. `no_new_privs` first, which lets an unprivileged process install a filter.
pub fn refuse_io_uring(cmd: &mut Command, errno: i32) -> &mut Command {
    let prog = program(errno);
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
