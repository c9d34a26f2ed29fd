//! The io_uring path: multishot `RECV` into a provided buffer ring, multishot `ACCEPT` on every
//! hosted node's listener (each completion is a new connection's fd), `SENDMSG` (zero-copy
//! `SENDMSG_ZC` for large sends) and `CONNECT`.
//!
//! One `RecvMulti` per connection stays armed: the kernel picks a free buffer from the ring the
//! reactor registered, writes what arrived and posts a completion naming the buffer; the reactor
//! copies the bytes into the connection's frame decoder and hands the buffer straight back. A
//! busy reactor sees data by reading the completion queue in shared memory, with no syscall per
//! message for receiving. Requests are queued during a reactor turn and submitted together at
//! its end ([`Uring::submit_pending`]), so a turn that sends to many peers enters the kernel
//! once.
//!
//! Every request may use memory of ours until its last completion, so the ring counts what is
//! outstanding and [`Uring::cancel_all`] waits for all of it before the reactor frees anything.
//!
//! The ring is set up with SINGLE_ISSUER (only the reactor thread touches it), DEFER_TASKRUN
//! (completion work, such as a receive whose data arrived, waits for the reactor's next
//! `io_uring_enter` instead of interrupting it) and TASKRUN_FLAG (the kernel says in the SQ
//! flags when such work is waiting, and `submit` then enters the kernel to run it). Deferred
//! work wakes no poller of the ring's own fd, so a blocked reactor watches an eventfd the
//! kernel signals when work or completions arrive ([`Uring::fd`]).
//!
//! Why DEFER_TASKRUN and not COOP_TASKRUN: cooperative task work runs through the
//! signal-delivery path on the way back to user space; deferred work runs in a batch inside
//! the enter that asks for it, which measured faster at every size
//! (`bluegene_notes/engine-latency.md#deferred-task-work-and-a-quiet-eventfd`).

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Buffer group id of the one provided-buffer ring.
const BGID: u16 = 0;
/// Offset of `optlen` in the kernel's 64-byte `io_uring_sqe` (see [`Uring::arm`]).
const SQE_OPTLEN: usize = 44;
const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);

/// The `user_data` of the cancellation [`Uring::cancel_all`] submits.
const CANCEL_ALL: u64 = u64::MAX;

/// Anonymous memory straight from `mmap`: page-aligned, and zero pages until first written
/// (an aligned `alloc_zeroed` would write every byte of megabytes of receive buffers at
/// start-up instead).
struct Pages {
    ptr: *mut u8,
    len: usize,
}

impl Pages {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl std::ops::Deref for Pages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable (zero until written) for as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len.max(1)) };
    }
}

/// A ring plus its provided receive buffers.
pub struct Uring {
    ring: IoUring,
    /// `entries` buffers of `buf_size` bytes, back to back, from a page boundary: a message
    /// that starts a sender's write then lands at the same page offset it was copied from in
    /// the sender's kernel, which keeps the kernel's copy out of AMD Zen's 4K-aliasing slow
    /// case (see `wire::decoder`).
    /// Freed only if the kernel let go of every request (see `Drop`).
    bufs: ManuallyDrop<Pages>,
    buf_size: u32,
    /// The shared ring of buffer descriptors (page aligned, `entries` × 16 bytes).
    ring_mem: *mut types::BufRingEntry,
    layout: Layout,
    entries: u16,
    /// Our copy of the tail we publish to the kernel.
    tail: u16,
    /// Completions copied out of the queue (reused).
    done: Vec<(u64, i32, u32)>,
    /// Requests queued or in flight whose last completion has not been seen.
    outstanding: usize,
    /// The kernel did not let go of every request when asked ([`Uring::let_go`]).
    abandoned: bool,
    /// Requests that found the submission queue full while the kernel refused to take it
    /// ([`transient`]): they go in, in order, before any later one.
    waiting: VecDeque<squeue::Entry>,
    /// The kernel refused the last enter ([`transient`]); cleared by one it takes.
    refused: bool,
    /// Signalled by the kernel when completions or deferred completion work arrive.
    wake: OwnedFd,
    /// Whether the kernel signals `wake` (see [`Uring::set_wakeups`]).
    wakeups: bool,
    /// Bytes after which a multishot receive ends by itself (Linux 6.16 and later; `None`
    /// once the kernel has refused the limit). See [`Uring::arm`].
    recv_limit: Option<u32>,
}

/// One completion of a multishot receive.
pub struct Completion<'a> {
    /// The `user_data` it was armed with.
    pub user_data: u64,
    /// Bytes received (`Ok(empty)` never happens: 0 is end of stream), or the error.
    pub result: Result<&'a [u8], io::Error>,
    /// The raw result: for an accept, the new connection's fd.
    pub raw: i32,
    /// Whether the request stays armed (if not, re-arm it). For a zero-copy send: a
    /// notification follows, and the buffers stay in use until it comes.
    pub more: bool,
    /// A zero-copy send's notification: the kernel no longer uses the send's buffers.
    pub notif: bool,
}

/// Completion queue entries, whatever the submission queue's size: the kernel sizes its hash
/// of armed requests from the completion queue (2^(log2 entries − 5) buckets, at most 256, from
/// 8192 on), and every cancellation by name walks one bucket. With the default 256-entry
/// submission queue (512 completions, 16 buckets) a reactor holding 10 000 connections' armed
/// receives walked ~600 of them per closed connection: `io_poll_find` was 8% of a 1024-node
/// BMG construction's CPU (`bluegene_notes/bmg-routing.md`). The queue costs 16 bytes an
/// entry.
const CQ_ENTRIES: u32 = 8192;

impl Uring {
    /// A ring of `sq_entries`, with `entries` (a power of two) receive buffers of `buf_size`.
    pub fn new(sq_entries: u32, entries: u16, buf_size: u32) -> io::Result<Self> {
        assert!(entries.is_power_of_two());
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(CQ_ENTRIES.max(2 * sq_entries))
            .build(sq_entries)?;
        // SAFETY: `eventfd` takes no pointers; a non-negative result is a new fd we own.
        let wake = unsafe {
            let fd = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(fd)
        };
        ring.submitter().register_eventfd(wake.as_raw_fd())?;
        let layout = Layout::from_size_align(
            entries as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: the layout has a non-zero size (entries >= 1).
        let ring_mem = unsafe { alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if ring_mem.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut me = Self {
            ring,
            bufs: ManuallyDrop::new(Pages::new(entries as usize * buf_size as usize)?),
            buf_size,
            ring_mem,
            layout,
            entries,
            tail: 0,
            done: Vec::with_capacity(64),
            outstanding: 0,
            abandoned: false,
            waiting: VecDeque::new(),
            refused: false,
            wake,
            wakeups: true,
            recv_limit: None,
        };
        // SAFETY: `ring_mem` is page aligned, holds `entries` descriptors, and lives (with
        // `bufs`) until `Drop` unregisters it.
        unsafe {
            me.ring
                .submitter()
                .register_buf_ring_with_flags(ring_mem as u64, entries, BGID, 0)?;
        }
        for bid in 0..entries {
            me.give_back(bid);
        }
        Ok(me)
    }

    /// The fd to wait on: an eventfd the kernel signals when completions or deferred
    /// completion work arrive. Watch it edge-triggered (as mio does): every signal is a new
    /// edge, so it never needs reading.
    pub fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Whether the kernel signals [`Self::fd`]. A spinning reactor reads the queues itself and
    /// turns the signal off: it costs an eventfd wake-up per arriving message. Before blocking
    /// it turns it back on and then asks [`Self::has_work`], for work that came meanwhile.
    pub fn set_wakeups(&mut self, on: bool) {
        if on == self.wakeups {
            return;
        }
        self.wakeups = on;
        let cq = self.ring.completion();
        if on {
            cq.enable_eventfd();
        } else {
            cq.disable_eventfd();
        }
        // The kernel queues work, then reads this flag; we write the flag, then look for work
        // (`has_work`). Each side's write must be visible before its read, or both could miss.
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Completions, or completion work the kernel holds for our next enter, are waiting; or
    /// requests the kernel refused for now are still to submit.
    pub fn has_work(&mut self) -> bool {
        let sq = self.ring.submission();
        let flagged = sq.taskrun() || sq.cq_overflow();
        drop(sq);
        flagged || self.stuck() || !self.ring.completion().is_empty()
    }

    /// How soon a reactor about to block must look at the ring again although nothing will
    /// signal it: at once for completions, or for work [`Self::has_work`] sees; after `pause`
    /// if the kernel refused the last enter, for a refused kernel is short of memory or busy
    /// with overflowed completions, and asking again at once would spin a blocking reactor
    /// on a core for as long as that lasts. `None`: it may block.
    pub fn work_due(&mut self, pause: Duration) -> Option<Duration> {
        if !self.ring.completion().is_empty() {
            return Some(Duration::ZERO);
        }
        if !self.has_work() {
            return None;
        }
        Some(if self.refused { pause } else { Duration::ZERO })
    }

    /// Return buffer `bid` to the kernel.
    fn give_back(&mut self, bid: u16) {
        let idx = (self.tail & (self.entries - 1)) as usize;
        // SAFETY: `idx < entries`, inside the descriptor array; `bid < entries`, so the address
        // and length name one whole buffer of `bufs`.
        unsafe {
            let e = &mut *self.ring_mem.add(idx);
            e.set_addr(
                self.bufs
                    .as_ptr()
                    .add(bid as usize * self.buf_size as usize) as u64,
            );
            e.set_len(self.buf_size);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field overlays the first descriptor's reserved bytes (the kernel's
        // layout); a release store publishes the descriptor writes above before the new tail.
        unsafe {
            let tail = types::BufRingEntry::tail(self.ring_mem) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Queue `sqe` (submitting what is queued first if the queue is full); it is submitted
    /// with the turn's other requests by [`Self::submit_pending`] or [`Self::poke`].
    ///
    /// # Safety
    /// Whatever memory and fds `sqe` lets the kernel use must stay valid until its last
    /// completion.
    unsafe fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        // SAFETY (both pushes): the caller vouches for what `sqe` refers to.
        if !self.waiting.is_empty() {
            // Behind the requests already waiting, in order.
            self.waiting.push_back(sqe.clone());
        } else if unsafe { self.ring.submission().push(sqe) }.is_err() {
            // The queue is full: submit it to make room.
            self.enter()?;
            if unsafe { self.ring.submission().push(sqe) }.is_err() {
                // The kernel took none: the request waits for a later turn's submission.
                self.waiting.push_back(sqe.clone());
            }
        }
        self.outstanding += 1;
        Ok(())
    }

    /// Submit what this turn queued, if anything (before the reactor blocks, and at the end
    /// of every turn, so requests go out together).
    pub fn submit_pending(&mut self) -> io::Result<()> {
        loop {
            self.refill();
            if self.ring.submission().is_empty() {
                return Ok(());
            }
            // Again only while requests wait and the kernel takes some.
            if self.enter()? == 0 || self.waiting.is_empty() {
                return Ok(());
            }
        }
    }

    /// Move waiting requests into the submission queue while it has room, oldest first.
    fn refill(&mut self) {
        while let Some(sqe) = self.waiting.front() {
            // SAFETY: pushed by `push`, whose callers vouched for what it refers to.
            if unsafe { self.ring.submission().push(sqe) }.is_err() {
                return;
            }
            self.waiting.pop_front();
        }
    }

    /// Enter the kernel: submit what is queued and run completion work it holds for us.
    /// How many requests it took; a [`transient`] refusal takes none and leaves them queued
    /// for a later turn (and [`Self::has_work`] true, so the reactor does not block on them).
    fn enter(&mut self) -> io::Result<usize> {
        match self.ring.submit() {
            Ok(n) => {
                self.refused = false;
                Ok(n)
            }
            Err(e) if transient(&e) => {
                self.refused = true;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Send the buffers `hdr` describes on `fd`, reported with `user_data`. Zero-copy (`zc`):
    /// the kernel pins the pages instead of copying them and says with a second completion
    /// ([`Completion::notif`]) when it is done with them.
    ///
    /// # Safety
    /// `hdr`, its iovec array and every buffer it names must stay valid and unmodified until
    /// the request's last completion (the notification, for a zero-copy send).
    pub unsafe fn send_msg(
        &mut self,
        fd: RawFd,
        hdr: *const libc::msghdr,
        zc: bool,
        user_data: u64,
    ) -> io::Result<()> {
        let sqe = if zc {
            opcode::SendMsgZc::new(types::Fd(fd), hdr).build()
        } else {
            opcode::SendMsg::new(types::Fd(fd), hdr).build()
        }
        .user_data(user_data);
        // SAFETY: the caller keeps `hdr` and what it names alive and unchanged until the last
        // completion.
        unsafe { self.push(&sqe) }
    }

    /// Connect `fd` to `addr`, reported with `user_data` (result 0 or a negative errno).
    ///
    /// # Safety
    /// `addr` (of `len` bytes) must stay valid until the completion.
    pub unsafe fn connect(
        &mut self,
        fd: RawFd,
        addr: *const libc::sockaddr,
        len: libc::socklen_t,
        user_data: u64,
    ) -> io::Result<()> {
        let sqe = opcode::Connect::new(types::Fd(fd), addr, len)
            .build()
            .user_data(user_data);
        // SAFETY: the caller keeps `addr` alive until the completion.
        unsafe { self.push(&sqe) }
    }

    /// Submit everything queued, trying again through passing refusals (`transient`) for at
    /// most `patience`. Before a socket closes: io_uring looks a request's fd number up when
    /// it is submitted, so a request still queued for a closed socket would reach whatever
    /// socket reuses the number.
    pub fn submit_all(&mut self, patience: Duration) -> io::Result<()> {
        let deadline = Instant::now() + patience;
        loop {
            self.submit_pending()?;
            if !self.stuck() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "io_uring refused for {} ms to take the requests queued",
                        patience.as_millis()
                    ),
                ));
            }
            std::thread::yield_now();
        }
    }

    /// Requests are queued that the kernel has not taken.
    fn stuck(&mut self) -> bool {
        !self.waiting.is_empty() || !self.ring.submission().is_empty()
    }

    /// Cancel every request and wait (at most `patience`) until each has posted its last
    /// completion, so nothing the kernel might still read or write is freed under it. Call it
    /// while the sockets are still open (what is queued is submitted first), ideally shut
    /// down: that ends receives and sends on their own. Whether the kernel let go of all.
    pub fn cancel_all(&mut self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        if self.submit_all(patience).is_err() {
            return false;
        }
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_ALL);
        // SAFETY: a cancellation refers to no memory of ours.
        if unsafe { self.push(&cancel) }.is_err() {
            return false;
        }
        while self.outstanding > 0 && Instant::now() < deadline {
            let wait = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&wait);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) || transient(&e) => {}
                Err(_) => break,
            }
            self.drain(|_| {});
        }
        self.outstanding == 0
    }

    /// Whether the kernel has let go of every request, so their memory may be freed. Requests
    /// still in flight are cancelled first (and waited for up to a second), unless the
    /// kernel has refused what is queued: the sockets it names may have closed by now, and
    /// no submission may reach them. Asked once: a ring that did not let go is not waited
    /// for again.
    pub fn let_go(&mut self) -> bool {
        if self.outstanding > 0 && !self.abandoned && !self.stuck() {
            self.cancel_all(Duration::from_secs(1));
        }
        self.abandoned = self.outstanding > 0;
        !self.abandoned
    }

    /// End every multishot receive after `bytes` (`None`: never). The reactor uses it to
    /// bound what a receive copies through the provided buffers before it sees that a large
    /// frame is under way and receives the rest straight into the frame's buffer.
    pub fn set_recv_limit(&mut self, bytes: Option<u32>) {
        self.recv_limit = bytes;
    }

    /// Whether multishot receives are armed with a limit (see [`Uring::set_recv_limit`]).
    pub fn recv_limit(&self) -> Option<u32> {
        self.recv_limit
    }

    /// Arm a multishot receive on `fd`, reported with `user_data`. With a receive limit it ends
    /// (its last completion without `more`) once that many bytes came; a kernel older than
    /// 6.16 refuses it with `EINVAL`, and the caller then drops the limit and arms again.
    pub fn arm(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        let mut sqe = opcode::RecvMulti::new(types::Fd(fd), BGID)
            .build()
            .user_data(user_data);
        if let Some(limit) = self.recv_limit {
            // The io-uring crate has no setter for a multishot receive's total limit, which
            // the kernel reads from the SQE's `optlen` (bytes 44..48 of the 64-byte SQE).
            // SAFETY: `Entry` is `repr(C)` around the kernel's `io_uring_sqe`, whose layout
            // is the kernel ABI; the write stays inside the entry and is aligned for a u32
            // (the entry is 8-aligned and 44 is a multiple of 4).
            unsafe {
                let raw = (&mut sqe as *mut squeue::Entry).cast::<u8>();
                raw.add(SQE_OPTLEN).cast::<u32>().write(limit);
            }
        }
        // SAFETY: the buffers the kernel may write into are the registered ring's, alive as long
        // as `self`; `fd` stays open until the connection is closed, and a closed connection's
        // late completions are recognized by their `user_data` and only give buffers back.
        unsafe { self.push(&sqe) }
    }

    /// Receive exactly `len` bytes (`MSG_WAITALL`: the kernel completes it when all have come,
    /// or on end of stream or an error) from `fd` into `buf`, reported with `user_data`.
    ///
    /// # Safety
    /// `buf` must stay valid for `len` bytes of writes, and untouched, until the completion.
    pub unsafe fn recv_into(
        &mut self,
        fd: RawFd,
        buf: *mut u8,
        len: u32,
        user_data: u64,
    ) -> io::Result<()> {
        let sqe = opcode::Recv::new(types::Fd(fd), buf, len)
            .flags(libc::MSG_WAITALL)
            .build()
            .user_data(user_data);
        // SAFETY: the caller lends `buf` until the completion.
        unsafe { self.push(&sqe) }
    }

    /// Ask the kernel to end the request armed with `target` (its last completion follows,
    /// `ECANCELED` if it had nothing more); this request itself completes with `user_data`.
    pub fn cancel(&mut self, target: u64, user_data: u64) -> io::Result<()> {
        let sqe = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data);
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { self.push(&sqe) }
    }

    /// Arm a multishot accept on the listening socket `fd`, reported with `user_data`: each
    /// completion carries a new connection's fd.
    pub fn arm_accept(&mut self, fd: RawFd, user_data: u64) -> io::Result<()> {
        // Close-on-exec, as `accept4` gives the epoll backend's: without it every process the
        // embedding program started (a node process of `bench --procs`, a test's child) inherited
        // the accepted sockets, and held them open or shut them down at its own death.
        let sqe = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        // SAFETY: an accept writes no memory of ours (no address is asked for); `fd` stays open
        // until the node stops, which shuts the listener down and so ends the request.
        unsafe { self.push(&sqe) }
    }

    /// Run pending completion work if the kernel asks for it: with TASKRUN_FLAG the kernel
    /// says so in the SQ flags, so a turn with nothing queued and nothing pending costs no
    /// syscall (a blocked reactor otherwise paid an empty `io_uring_enter` every turn).
    pub fn poke(&mut self) -> io::Result<()> {
        self.refill();
        let sq = self.ring.submission();
        let idle = sq.is_empty() && !sq.taskrun() && !sq.cq_overflow();
        drop(sq);
        if idle {
            return Ok(());
        }
        if self.enter()? > 0 && !self.waiting.is_empty() {
            self.submit_pending()?;
        }
        Ok(())
    }

    /// Whether any completion waits (a load of the queue's tail: no syscall).
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Hand every waiting completion to `f`, then give its buffer back.
    pub fn drain(&mut self, mut f: impl FnMut(Completion<'_>)) {
        let mut done = std::mem::take(&mut self.done);
        done.extend(
            self.ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(user_data, res, flags) in &done {
            let more = cqueue::more(flags);
            if !more {
                self.outstanding = self.outstanding.saturating_sub(1);
            }
            if user_data == CANCEL_ALL {
                continue;
            }
            let bid = cqueue::buffer_select(flags);
            let result = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                match bid {
                    Some(b) if (b as usize) < self.entries as usize => {
                        let start = b as usize * self.buf_size as usize;
                        Ok(&self.bufs[start..start + (res as usize).min(self.buf_size as usize)])
                    }
                    _ => Ok(&[][..]),
                }
            };
            f(Completion {
                user_data,
                result,
                raw: res,
                more,
                notif: cqueue::notif(flags),
            });
            if let Some(b) = bid {
                if b < self.entries {
                    self.give_back(b);
                }
            }
        }
        done.clear();
        self.done = done;
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // A reactor that stopped on an error skipped its orderly `cancel_all`: `let_go` does
        // it, so no receive writes into the buffers freed below. If the kernel would not let
        // go, the buffers are leaked instead: closing the ring (the `IoUring` field, dropped
        // after this) ends its requests, and submits nothing still queued.
        if !self.let_go() {
            return;
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
        // SAFETY: allocated in `new` with this layout; the kernel no longer references it.
        // `bufs` is dropped once, here.
        unsafe {
            dealloc(self.ring_mem as *mut u8, self.layout);
            ManuallyDrop::drop(&mut self.bufs);
        }
    }
}

/// Whether `io_uring_enter` said "not now" rather than "never": EAGAIN (the kernel could not
/// allocate a request), EBUSY (completions overflowed, on kernels before 5.19), EINTR (a
/// signal came). The requests stay queued, and the next enter may take them.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
    )
}

/// Why io_uring cannot be used here, or `None` if it can (a ring and a buffer ring set up).
/// `kernel.io_uring_disabled` (Linux 6.6+): 0 allows everyone, 1 only members of
/// `kernel.io_uring_group` and holders of CAP_SYS_ADMIN, 2 no one.
pub fn unavailable() -> Option<String> {
    if io_uring_disabled() == "2" {
        return Some("kernel.io_uring_disabled = 2: io_uring is off for every process".into());
    }
    Uring::new(8, 2, 4096).err().map(|e| refusal(&e))
}

/// `kernel.io_uring_disabled`, or empty where the kernel (before 6.6) has no such sysctl.
fn io_uring_disabled() -> String {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

/// Whether a ring's set-up failed because this process may not have one here (no permission,
/// not enough lockable memory), rather than for a bug or a setting: a reason to fall back.
pub fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ENOMEM | libc::ENOSYS)
    )
}

/// In words, why setting up a ring failed with `e`.
pub fn refusal(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no io_uring (ENOSYS)".into(),
        Some(libc::EPERM) if io_uring_disabled() == "1" => {
            "kernel.io_uring_disabled = 1 and this process is \
             neither in kernel.io_uring_group nor holds CAP_SYS_ADMIN (EPERM)"
                .into()
        }
        Some(libc::EPERM) => "io_uring is forbidden here (EPERM: a seccomp filter, as in a \
             container's default profile)"
            .into(),
        Some(libc::ENOMEM) => {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit writes one rlimit we own.
            let limit = match unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } {
                0 if lim.rlim_cur == libc::RLIM_INFINITY => "unlimited".to_owned(),
                0 => format!("{} KiB", lim.rlim_cur / 1024),
                _ => "unknown".to_owned(),
            };
            format!(
                "cannot lock memory for the ring (ENOMEM: RLIMIT_MEMLOCK too low, {limit} for \
                 this user's rings; `ulimit -l` raises it)"
            )
        }
        Some(libc::EINVAL) => "the kernel lacks the io_uring features weft needs (EINVAL)".into(),
        _ => format!("io_uring setup failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    /// Whether `fd` becomes readable within `ms`.
    fn readable(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    fn received(u: &mut Uring) -> Vec<u8> {
        u.poke().unwrap();
        let mut got = Vec::new();
        u.drain(|c| got.extend_from_slice(c.result.unwrap()));
        got
    }

    /// A ring with `entries` buffers of `size`, a multishot receive (with `limit`) armed on one
    /// end of a socket pair, and the other end to write to; `None` without io_uring.
    fn armed(
        entries: u16,
        size: u32,
        limit: Option<u32>,
    ) -> Option<(Uring, UnixStream, UnixStream)> {
        let Ok(mut u) = Uring::new(8, entries, size) else {
            eprintln!("io_uring unavailable here: skipped");
            return None;
        };
        let (a, b) = UnixStream::pair().unwrap();
        u.set_recv_limit(limit);
        u.arm(a.as_raw_fd(), 7).unwrap();
        u.submit_pending().unwrap();
        Some((u, a, b))
    }

    /// A spinning reactor turns the ring's signal off and still sees arrivals through
    /// `has_work`; a reactor about to block turns it on and is woken by the next arrival.
    #[test]
    fn the_eventfd_signals_arrivals_only_while_wakeups_are_on() {
        let Some((mut u, _a, mut b)) = armed(4, 4096, None) else {
            return;
        };

        u.set_wakeups(false);
        assert!(!u.has_work());
        b.write_all(b"one").unwrap();
        assert!(!readable(u.fd(), 50), "signalled while wakeups were off");
        assert!(u.has_work(), "the arrival is visible without the signal");
        assert_eq!(received(&mut u), b"one");

        u.set_wakeups(true);
        assert!(!readable(u.fd(), 0));
        b.write_all(b"two").unwrap();
        assert!(readable(u.fd(), 1000), "no signal while wakeups were on");
        assert_eq!(received(&mut u), b"two");
    }

    /// Every provided buffer starts on a page, so a message that starts a sender's write lands
    /// at the page offset the sender's kernel copied it from (see `wire::decoder`).
    #[test]
    fn provided_buffers_start_on_pages() {
        let Some((mut u, _a, mut b)) = armed(4, 4096, None) else {
            return;
        };
        for round in 0..6u8 {
            b.write_all(&[round; 100]).unwrap();
            let mut seen = 0;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while seen == 0 && std::time::Instant::now() < deadline {
                u.poke().unwrap();
                u.drain(|c| {
                    let chunk = c.result.unwrap();
                    assert_eq!(
                        chunk.as_ptr() as usize % crate::wire::PAGE,
                        0,
                        "round {round}"
                    );
                    seen += chunk.len();
                });
            }
            assert_eq!(seen, 100);
        }
    }

    /// `SQE_OPTLEN` is where the io-uring crate itself puts `optlen` (for a setsockopt).
    #[test]
    fn the_receive_limit_is_written_where_the_kernel_reads_optlen() {
        let sqe =
            opcode::SetSockOpt::new(types::Fd(3), 1, 2, std::ptr::null(), 0xa5a5_5a5a).build();
        // SAFETY: `Entry` is a 64-byte `repr(C)` struct (asserted above); reading its bytes is
        // reading initialized plain data.
        let bytes: [u8; 64] = unsafe { std::mem::transmute(sqe) };
        let at = u32::from_ne_bytes(bytes[SQE_OPTLEN..SQE_OPTLEN + 4].try_into().unwrap());
        assert_eq!(at, 0xa5a5_5a5a);
    }

    /// A limited multishot receive ends by itself once the limit is reached (Linux 6.16+;
    /// an older kernel refuses the limit with EINVAL, which the reactor handles).
    #[test]
    fn a_limited_multishot_receive_ends_after_the_limit() {
        let Some((mut u, _a, mut b)) = armed(16, 1024, Some(3000)) else {
            return;
        };
        b.write_all(&[1u8; 8000]).unwrap();
        let (mut got, mut ended, mut refused) = (0, false, false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !ended && std::time::Instant::now() < deadline {
            u.poke().unwrap();
            u.drain(|c| match c.result {
                Ok(b) => {
                    got += b.len();
                    ended |= !c.more;
                }
                Err(e) => {
                    refused = e.raw_os_error() == Some(libc::EINVAL);
                    ended = true;
                }
            });
        }
        if refused {
            eprintln!("this kernel has no multishot receive limit: skipped");
            return;
        }
        assert!(ended, "the receive did not end ({got} bytes)");
        assert!((3000..8000).contains(&got), "ended after {got} bytes");
    }
}
