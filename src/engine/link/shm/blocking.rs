//! A link used by one thread without a reactor (probes, tests, a peer process that only echoes):
//! send everything, receive something, spinning or sleeping on the bell, and ending as soon as
//! the peer does.

use super::{fds, pipe::Corrupt, Link};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Why a blocking send or receive stopped.
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    /// The peer's process exited or it closed the link.
    #[error("the peer is gone")]
    PeerGone,
    /// The peer broke the ring.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
    /// Waiting failed.
    #[error("waiting on a shared-memory link: {0}")]
    Io(#[from] io::Error),
    /// Nothing happened for the time allowed.
    #[error("nothing from the peer in {0:?}")]
    Timeout(Duration),
}

/// How a blocked end waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll the ring (a core spent, no system call on the way).
    Spin,
    /// Sleep on the bell (a system call per wake-up, none while the other end is busy).
    Sleep,
}

impl Link {
    /// Send all of `bytes`, waiting for room as `wait` says, at most `timeout` at a time.
    pub fn send_all(&mut self, bytes: &[u8], wait: Wait, timeout: Duration) -> Result<(), Ended> {
        let mut sent = 0;
        let mut spins = 0u32;
        while sent < bytes.len() {
            let n = self.writer.write(&bytes[sent..])?;
            sent += n;
            if n > 0 {
                if self.writer.must_ring() {
                    self.peer_bell.ring();
                }
                continue;
            }
            spins += 1;
            if wait == Wait::Spin && !spins.is_multiple_of(4096) {
                std::hint::spin_loop();
                continue;
            }
            if self.peer_gone() {
                return Err(Ended::PeerGone);
            }
            if wait == Wait::Sleep && self.writer.wait_for_room()? {
                self.sleep(timeout)?;
            }
        }
        Ok(())
    }

    /// Receive what waits into `buf`, waiting for something as `wait` says, at most `timeout`:
    /// how many bytes (at least one).
    pub fn recv_some(
        &mut self,
        buf: &mut [u8],
        wait: Wait,
        timeout: Duration,
    ) -> Result<usize, Ended> {
        let mut spins = 0u32;
        let start = std::time::Instant::now();
        loop {
            let n = self.reader.read(buf)?;
            if n > 0 {
                if self.reader.must_ring() {
                    self.peer_bell.ring();
                }
                return Ok(n);
            }
            spins += 1;
            if wait == Wait::Spin && !spins.is_multiple_of(4096) {
                std::hint::spin_loop();
                continue;
            }
            if self.peer_gone() {
                return Err(Ended::PeerGone);
            }
            if start.elapsed() > timeout {
                return Err(Ended::Timeout(timeout));
            }
            if wait == Wait::Sleep && self.reader.sleep()? {
                self.sleep(timeout)?;
                self.reader.awake();
            }
        }
    }

    /// Sleep until the bell rings, the peer goes, or `timeout`.
    fn sleep(&self, timeout: Duration) -> Result<(), Ended> {
        let mut fds = [
            libc::pollfd {
                fd: self.bell.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: three valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e.into());
        }
        if r == 0 {
            return Err(Ended::Timeout(timeout));
        }
        self.bell.drain();
        if fds[1].revents != 0 || fds::exited(&self.pidfd) {
            return Err(Ended::PeerGone);
        }
        Ok(())
    }
}
