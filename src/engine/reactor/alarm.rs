//! The alarm of a reactor its caller drives ([`super::Driven`]): a timerfd in the reactor's
//! epoll, set when the caller arms the reactor to the next timer's deadline, so that the one
//! descriptor the caller waits on becomes readable for a due timer as for I/O.

use mio::unix::SourceFd;
use mio::{Interest, Poll, Token};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A timerfd watched by the reactor's epoll.
pub(super) struct Alarm {
    fd: OwnedFd,
}

impl Alarm {
    /// A disarmed alarm in `poll`, under `token`.
    pub(super) fn new(poll: &Poll, token: Token) -> std::io::Result<Self> {
        // SAFETY: timerfd_create has no memory arguments; a descriptor it returns is ours.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        poll.registry()
            .register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(Self { fd })
    }

    /// Ring `after` from now (at once for zero); `None` disarms it.
    pub(super) fn set(&self, after: Option<Duration>) -> std::io::Result<()> {
        let value = match after {
            // A zero it_value disarms a timerfd: the soonest it can ring is a nanosecond.
            Some(d) => libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos().max(u32::from(d.is_zero())) as libc::c_long,
            },
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// It rang: read its count, so that the descriptor is quiet until it is set again.
    pub(super) fn drain(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into `n`; a non-blocking read of a quiet timerfd
        // fails with EAGAIN, which is fine.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}
