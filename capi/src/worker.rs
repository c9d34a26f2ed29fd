//! The worker: one process's endpoint behind the C ABI, driven by its creating thread or by
//! a thread of weft's, and every `weft_*` call on it.

use crate::event::{weft_callback, Callback};
use crate::status::*;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;
use weft::prelude::{AgreeOp, DrivenEndpoint, EndpointConfig, Rank, Signal, StartError};
use weft::proto::heartbeat::HeartbeatConfig;
use weft::transport::driven::wait_readable;

/// Only the creating thread calls.
pub const WEFT_THREAD_SINGLE: u32 = 0;
/// Any thread, one call at a time (an overlapping call fails with `WEFT_ERR_THREAD`).
pub const WEFT_THREAD_SERIALIZED: u32 = 1;
/// Any thread, at once (`WEFT_PROGRESS_THREAD` only).
pub const WEFT_THREAD_MULTI: u32 = 2;

/// The creating thread drives the worker (`weft_progress`, `weft_arm`, `weft_get_fd`).
pub const WEFT_PROGRESS_CALLER: u32 = 0;
/// A thread of weft's drives it and runs the callback.
pub const WEFT_PROGRESS_THREAD: u32 = 1;

/// Agreement on the AND of the values.
pub const WEFT_AGREE_AND: u32 = 0;
/// On their OR.
pub const WEFT_AGREE_OR: u32 = 1;
/// On their maximum.
pub const WEFT_AGREE_MAX: u32 = 2;

/// How a worker runs; `weft_config_init` fills in the defaults.
#[repr(C)]
pub struct weft_config {
    /// A `WEFT_THREAD_*` (default `WEFT_THREAD_SINGLE`).
    pub thread_level: u32,
    /// A `WEFT_PROGRESS_*` (default `WEFT_PROGRESS_CALLER`).
    pub progress: u32,
    /// Called for every event (may be null: events are then dropped).
    pub callback: weft_callback,
    /// Handed to the callback.
    pub callback_arg: *mut c_void,
    /// How long the launcher's address exchange may take, in ms (default 60000).
    pub exchange_timeout_ms: u32,
    /// The period of the ring heartbeats that find a hung rank, in ms (default 100; a rank
    /// silent for 3 periods is suspected; 0: no heartbeats, lost connections only). Every
    /// rank of a job must use the same.
    pub heartbeat_ms: u32,
}

/// What the application asks, queued to weft's progress thread.
enum Req {
    Send { to: Rank, tag: u64, data: Vec<u8> },
    Broadcast(Vec<u8>),
    Agree { value: u64, op: AgreeOp },
    Revoke,
    Leave,
}

impl Req {
    fn apply(self, ep: &DrivenEndpoint) {
        match self {
            Req::Send { to, tag, data } => ep.send_as(to, tag, data),
            Req::Broadcast(data) => ep.broadcast(data),
            Req::Agree { value, op } => {
                ep.agree(value, op);
            }
            Req::Revoke => ep.revoke(),
            Req::Leave => ep.leave(),
        }
    }
}

/// The endpoint on the creating thread.
struct Caller {
    ep: DrivenEndpoint,
    cb: Callback,
    /// Inside the callback: `weft_progress` may not run.
    in_callback: Cell<bool>,
}

/// The endpoint on weft's progress thread.
struct Threaded {
    /// The queue to it, and the next tag and agreement, taken together so that the
    /// thread hands the endpoint the requests in the order their numbers were given.
    queue: Mutex<(Sender<Req>, u64, u64)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One worker per process, boxed once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Style {
    Caller(Caller),
    Threaded(Threaded),
}

/// One process's endpoint at its rank (opaque).
pub struct weft_worker {
    rank: u32,
    size: u32,
    level: u32,
    owner: ThreadId,
    /// A call is under way (`WEFT_THREAD_SERIALIZED`).
    busy: AtomicBool,
    signal: Signal,
    /// The caller's own numbering of sends and agreements (`WEFT_PROGRESS_CALLER`).
    next_tag: Cell<u64>,
    next_agree: Cell<u64>,
    style: Style,
}

/// A call admitted by the thread level; lets go of `busy` when it ends.
struct Entry<'a>(&'a weft_worker);

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        if self.0.level == WEFT_THREAD_SERIALIZED {
            self.0.busy.store(false, Ordering::Release);
        }
    }
}

impl weft_worker {
    /// Admit a call from this thread, or say why not.
    fn enter(&self) -> Result<Entry<'_>, weft_status> {
        match self.level {
            WEFT_THREAD_SERIALIZED => {
                if self.busy.swap(true, Ordering::AcqRel) {
                    return Err(fail(
                        WEFT_ERR_THREAD,
                        "WEFT_THREAD_SERIALIZED: a call overlapped another",
                    ));
                }
            }
            WEFT_THREAD_MULTI => {}
            _ => {
                if std::thread::current().id() != self.owner {
                    return Err(fail(
                        WEFT_ERR_THREAD,
                        "WEFT_THREAD_SINGLE: only the thread that created the worker calls it",
                    ));
                }
            }
        }
        Ok(Entry(self))
    }

    /// Hand the endpoint `req` (now, or through the queue); the number it took.
    fn request(&self, make: impl FnOnce(u64, u64) -> Req) -> Result<u64, weft_status> {
        match &self.style {
            Style::Caller(c) => {
                let (tag, k) = (self.next_tag.get(), self.next_agree.get());
                let req = make(tag, k);
                let n = match req {
                    Req::Send { .. } => {
                        self.next_tag.set(tag + 1);
                        tag
                    }
                    Req::Agree { .. } => {
                        self.next_agree.set(k + 1);
                        k
                    }
                    _ => 0,
                };
                req.apply(&c.ep);
                Ok(n)
            }
            Style::Threaded(t) => {
                let mut q = t.queue.lock().unwrap_or_else(|p| p.into_inner());
                let req = make(q.1, q.2);
                let n = match req {
                    Req::Send { .. } => {
                        q.1 += 1;
                        q.1 - 1
                    }
                    Req::Agree { .. } => {
                        q.2 += 1;
                        q.2 - 1
                    }
                    _ => 0,
                };
                q.0.send(req)
                    .map_err(|_| fail(WEFT_ERR_GONE, "weft's progress thread has stopped"))?;
                drop(q);
                let _ = self.signal.raise();
                Ok(n)
            }
        }
    }
}

/// Fill `cfg` with the defaults.
///
/// # Safety
/// `cfg` is null or points to a `weft_config` to write.
#[no_mangle]
pub unsafe extern "C" fn weft_config_init(cfg: *mut weft_config) -> weft_status {
    guard(|| {
        if cfg.is_null() {
            return fail(WEFT_ERR_INVALID, "weft_config_init: cfg is null");
        }
        // SAFETY: non-null, and the caller's to write.
        unsafe {
            cfg.write(weft_config {
                thread_level: WEFT_THREAD_SINGLE,
                progress: WEFT_PROGRESS_CALLER,
                callback: None,
                callback_arg: std::ptr::null_mut(),
                exchange_timeout_ms: 60_000,
                heartbeat_ms: 100,
            })
        };
        WEFT_OK
    })
}

/// The endpoint's configuration from the C one.
fn endpoint_config(cfg: &weft_config) -> EndpointConfig {
    let mut ec = EndpointConfig {
        exchange_timeout: Duration::from_millis(u64::from(cfg.exchange_timeout_ms)),
        ..EndpointConfig::default()
    };
    ec.service.membership.heartbeat = (cfg.heartbeat_ms > 0).then(|| HeartbeatConfig {
        period: Duration::from_millis(u64::from(cfg.heartbeat_ms)),
        ..HeartbeatConfig::default()
    });
    ec
}

/// Why a start failed, as a status and its words.
fn start_failed(e: StartError) -> weft_status {
    match e {
        StartError::Launch(e) => fail(WEFT_ERR_LAUNCH, e),
        StartError::Engine(e) => fail(WEFT_ERR_ENGINE, e),
    }
}

/// Start this process's worker at the rank its launcher gave it (srun, mpirun,
/// mpiexec.hydra, or `WEFT_RANK`/`WEFT_SIZE`/`WEFT_RENDEZVOUS`); returns once every rank's
/// address is known. `*out` is the worker, the caller's until `weft_finalize`.
///
/// # Safety
/// `cfg` is null (the defaults) or a valid `weft_config`; `out` points to a pointer to
/// write. Under `WEFT_PROGRESS_THREAD`, the callback and its argument are used from weft's
/// progress thread.
#[no_mangle]
pub unsafe extern "C" fn weft_init(
    cfg: *const weft_config,
    out: *mut *mut weft_worker,
) -> weft_status {
    guard(|| {
        if out.is_null() {
            return fail(WEFT_ERR_INVALID, "weft_init: out is null");
        }
        // SAFETY: non-null, the caller's to write.
        unsafe { out.write(std::ptr::null_mut()) };
        let mut defaults = std::mem::MaybeUninit::<weft_config>::uninit();
        let cfg = if cfg.is_null() {
            // SAFETY: a valid place for a config, then filled in.
            unsafe {
                weft_config_init(defaults.as_mut_ptr());
                &*defaults.as_ptr()
            }
        } else {
            // SAFETY: the caller's valid config.
            unsafe { &*cfg }
        };
        if cfg.thread_level > WEFT_THREAD_MULTI {
            return fail(
                WEFT_ERR_INVALID,
                format!("thread_level {}", cfg.thread_level),
            );
        }
        let cb = Callback {
            f: cfg.callback,
            arg: cfg.callback_arg,
        };
        let worker = match cfg.progress {
            WEFT_PROGRESS_CALLER if cfg.thread_level != WEFT_THREAD_SINGLE => {
                return fail(
                    WEFT_ERR_INVALID,
                    "WEFT_PROGRESS_CALLER runs on the thread that created it (an io_uring \
                     ring has one issuer): use WEFT_THREAD_SINGLE, or WEFT_PROGRESS_THREAD",
                )
            }
            WEFT_PROGRESS_CALLER => match DrivenEndpoint::from_launcher(&endpoint_config(cfg)) {
                Ok(ep) => weft_worker {
                    rank: ep.rank().0,
                    size: ep.size(),
                    level: cfg.thread_level,
                    owner: std::thread::current().id(),
                    busy: AtomicBool::new(false),
                    signal: ep.signal(),
                    next_tag: Cell::new(0),
                    next_agree: Cell::new(0),
                    style: Style::Caller(Caller {
                        ep,
                        cb,
                        in_callback: Cell::new(false),
                    }),
                },
                Err(e) => return start_failed(e),
            },
            WEFT_PROGRESS_THREAD => match start_thread(endpoint_config(cfg), cb) {
                Ok((rank, size, signal, t)) => weft_worker {
                    rank,
                    size,
                    level: cfg.thread_level,
                    owner: std::thread::current().id(),
                    busy: AtomicBool::new(false),
                    signal,
                    next_tag: Cell::new(0),
                    next_agree: Cell::new(0),
                    style: Style::Threaded(t),
                },
                Err(s) => return s,
            },
            other => return fail(WEFT_ERR_INVALID, format!("progress {other}")),
        };
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(worker))) };
        WEFT_OK
    })
}

/// Start weft's progress thread, which creates the endpoint (its ring is that thread's) and
/// drives it: requests from the queue, turns, callbacks, and a wait on its descriptor.
fn start_thread(
    cfg: EndpointConfig,
    cb: Callback,
) -> Result<(u32, u32, Signal, Threaded), weft_status> {
    let (tx, rx) = channel::<Req>();
    let (ready_tx, ready) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    let thread = std::thread::Builder::new()
        .name("weft-progress".into())
        .spawn(move || {
            let ep = match DrivenEndpoint::from_launcher(&cfg) {
                Ok(ep) => ep,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok((ep.rank().0, ep.size(), ep.signal())));
            drive(&ep, &rx, &halt, cb);
            let _ = ep.stop();
        })
        .map_err(|e| {
            fail(
                WEFT_ERR_ENGINE,
                format!("start weft's progress thread: {e}"),
            )
        })?;
    match ready.recv() {
        Ok(Ok((rank, size, signal))) => Ok((
            rank,
            size,
            signal,
            Threaded {
                queue: Mutex::new((tx, 0, 0)),
                stop,
                thread: Some(thread),
            },
        )),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(start_failed(e))
        }
        Err(_) => {
            let _ = thread.join();
            Err(fail(WEFT_ERR_PANIC, "weft's progress thread died starting"))
        }
    }
}

/// The progress thread's loop, until `stop` or the endpoint is gone.
fn drive(ep: &DrivenEndpoint, rx: &Receiver<Req>, stop: &AtomicBool, cb: Callback) {
    while !stop.load(Ordering::Acquire) {
        let mut busy = false;
        while let Ok(r) = rx.try_recv() {
            r.apply(ep);
            busy = true;
        }
        match ep.progress() {
            Ok(worked) => busy |= worked,
            Err(_) => return,
        }
        while let Some(e) = ep.try_next() {
            cb.deliver(e);
            busy = true;
        }
        if busy {
            continue;
        }
        match (ep.arm(), ep.fd()) {
            (Ok(true), Some(fd)) => {
                let _ = wait_readable(fd, Duration::from_secs(1));
            }
            (Ok(_), Some(_)) => {}
            _ => return,
        }
    }
}

/// The worker behind `w`, or `WEFT_ERR_INVALID`.
///
/// # Safety
/// `w` is null or a worker from `weft_init` not yet finalized.
unsafe fn worker<'a>(w: *const weft_worker) -> Result<&'a weft_worker, weft_status> {
    // SAFETY: the caller's promise.
    unsafe { w.as_ref() }.ok_or_else(|| fail(WEFT_ERR_INVALID, "the worker is null"))
}

/// `f` on the worker behind `w`, admitted by its thread level.
///
/// # Safety
/// As [`worker`].
unsafe fn with(
    w: *const weft_worker,
    f: impl FnOnce(&weft_worker) -> Result<weft_status, weft_status>,
) -> weft_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let w = match unsafe { worker(w) } {
            Ok(w) => w,
            Err(s) => return s,
        };
        let _entry = match w.enter() {
            Ok(e) => e,
            Err(s) => return s,
        };
        f(w).unwrap_or_else(|s| s)
    })
}

/// This process's rank (`UINT32_MAX` for a null worker).
///
/// # Safety
/// `w` is null or a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_rank(w: *const weft_worker) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { w.as_ref() }.map_or(u32::MAX, |w| w.rank)
}

/// The job's size (0 for a null worker).
///
/// # Safety
/// `w` is null or a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_size(w: *const weft_worker) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { w.as_ref() }.map_or(0, |w| w.size)
}

/// The `len` bytes at `data`, copied (null is fine for `len == 0`).
///
/// # Safety
/// `data` is valid for `len` bytes, or null with `len == 0`.
unsafe fn bytes(data: *const c_void, len: usize) -> Result<Vec<u8>, weft_status> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if data.is_null() {
        return Err(fail(WEFT_ERR_INVALID, "data is null with a nonzero length"));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec())
}

/// Send `len` bytes at `data` to `rank`, routed over the BMG. The bytes are copied before
/// it returns (the buffer is the caller's again at once). Exactly one `WEFT_EV_DELIVERED`
/// or `WEFT_EV_FAILED` with the tag written to `*tag` (if not null) follows, also when
/// `rank` dies.
///
/// # Safety
/// `w` a live worker; `data` valid for `len` bytes (or null with 0); `tag` null or writable.
#[no_mangle]
pub unsafe extern "C" fn weft_send(
    w: *mut weft_worker,
    rank: u32,
    data: *const c_void,
    len: usize,
    tag: *mut u64,
) -> weft_status {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        with(w, |w| {
            if rank >= w.size {
                return Err(fail(
                    WEFT_ERR_INVALID,
                    format!("rank {rank} in a job of {}", w.size),
                ));
            }
            let data = bytes(data, len)?;
            let t = w.request(|tag, _| Req::Send {
                to: Rank(rank),
                tag,
                data,
            })?;
            if !tag.is_null() {
                tag.write(t);
            }
            Ok(WEFT_OK)
        })
    }
}

/// Broadcast `len` bytes at `data` to every live rank (this one gets a
/// `WEFT_EV_BROADCAST` too); copied before it returns.
///
/// # Safety
/// As `weft_send`.
#[no_mangle]
pub unsafe extern "C" fn weft_broadcast(
    w: *mut weft_worker,
    data: *const c_void,
    len: usize,
) -> weft_status {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        with(w, |w| {
            let data = bytes(data, len)?;
            w.request(|_, _| Req::Broadcast(data))?;
            Ok(WEFT_OK)
        })
    }
}

/// Agree with every survivor on `op` (a `WEFT_AGREE_*`) over each one's `value`, and on who
/// failed (ULFM's `MPIX_Comm_agree`): every live rank calls it, in the same order; each gets
/// `WEFT_EV_AGREED` for the instance written to `*instance` (if not null).
///
/// # Safety
/// `w` a live worker; `instance` null or writable.
#[no_mangle]
pub unsafe extern "C" fn weft_agree(
    w: *mut weft_worker,
    value: u64,
    op: u32,
    instance: *mut u64,
) -> weft_status {
    // SAFETY: the caller's promises, passed on.
    unsafe {
        with(w, |w| {
            let op = match op {
                WEFT_AGREE_AND => AgreeOp::And,
                WEFT_AGREE_OR => AgreeOp::Or,
                WEFT_AGREE_MAX => AgreeOp::Max,
                other => return Err(fail(WEFT_ERR_INVALID, format!("agree op {other}"))),
            };
            let k = w.request(|_, _| Req::Agree { value, op })?;
            if !instance.is_null() {
                instance.write(k);
            }
            Ok(WEFT_OK)
        })
    }
}

/// Revoke (ULFM's `MPIX_Comm_revoke`): every live rank, this one included, gets
/// `WEFT_EV_REVOKED` with this rank once.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_revoke(w: *mut weft_worker) -> weft_status {
    // SAFETY: the caller's promise, passed on.
    unsafe { with(w, |w| w.request(|_, _| Req::Revoke).map(|_| WEFT_OK)) }
}

/// Leave the job on purpose: the others install a view without this rank, and this rank
/// gets its own `WEFT_EV_LEFT` once that view is in place.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_leave(w: *mut weft_worker) -> weft_status {
    // SAFETY: the caller's promise, passed on.
    unsafe { with(w, |w| w.request(|_, _| Req::Leave).map(|_| WEFT_OK)) }
}

/// One turn without waiting, then the callback for each event, on this thread, inside this
/// call. Returns how much work it did (events delivered, plus one if the turn found I/O or
/// timers to handle): drain it to 0 before `weft_arm`. A negative `weft_status` on error
/// (`WEFT_ERR_THREAD` from inside a callback). Under `WEFT_PROGRESS_THREAD`, 0.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_progress(w: *mut weft_worker) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        with(w, |w| {
            let Style::Caller(c) = &w.style else {
                return Ok(0);
            };
            if c.in_callback.get() {
                return Err(fail(
                    WEFT_ERR_THREAD,
                    "weft_progress from inside a callback (send from there; progress after)",
                ));
            }
            let mut n = i32::from(
                c.ep.progress()
                    .map_err(|e| fail(WEFT_ERR_GONE, format!("the worker stopped: {e}")))?,
            );
            c.in_callback.set(true);
            while let Some(e) = c.ep.try_next() {
                n = n.saturating_add(i32::from(c.cb.deliver(e)));
            }
            c.in_callback.set(false);
            Ok(n)
        })
    }
}

/// The descriptor to wait on after `weft_arm` answered `WEFT_OK` (readable when there is
/// work; level-triggered; the worker's, never to be closed by the caller). Negative
/// `weft_status` under `WEFT_PROGRESS_THREAD` or once the worker is gone.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_get_fd(w: *const weft_worker) -> i32 {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        with(w, |w| match &w.style {
            Style::Caller(c) => {
                c.ep.fd()
                    .ok_or_else(|| fail(WEFT_ERR_GONE, "the worker stopped"))
            }
            Style::Threaded(_) => Err(fail(
                WEFT_ERR_INVALID,
                "a WEFT_PROGRESS_THREAD worker has no descriptor: weft's thread waits on it",
            )),
        })
    }
}

/// Get ready to wait on `weft_get_fd`: `WEFT_OK` if the caller may wait now (the descriptor
/// turns readable when there is work), `WEFT_BUSY` if events or work are pending (progress
/// first). Wait only after `WEFT_OK`.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_arm(w: *mut weft_worker) -> weft_status {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        with(w, |w| match &w.style {
            Style::Caller(c) => match c.ep.arm() {
                Ok(true) => Ok(WEFT_OK),
                Ok(false) => Ok(WEFT_BUSY),
                Err(e) => Err(fail(WEFT_ERR_GONE, format!("the worker stopped: {e}"))),
            },
            Style::Threaded(_) => Err(fail(
                WEFT_ERR_INVALID,
                "a WEFT_PROGRESS_THREAD worker is armed by weft's thread",
            )),
        })
    }
}

/// Arm, then wait on the descriptor up to `timeout_ms` (negative: no limit): `WEFT_OK` when
/// there may be work (or `weft_arm` found some), `WEFT_ERR_TIMEOUT` if nothing came.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_wait(w: *mut weft_worker, timeout_ms: i32) -> weft_status {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        match weft_arm(w) {
            WEFT_OK => {}
            WEFT_BUSY => return WEFT_OK,
            s => return s,
        }
        let fd = weft_get_fd(w);
        if fd < 0 {
            return fd;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        match libc::poll(&mut p, 1, timeout_ms.max(-1)) {
            0 => WEFT_ERR_TIMEOUT,
            n if n > 0 => WEFT_OK,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                WEFT_OK
            }
            _ => fail(
                WEFT_ERR_ENGINE,
                format!("poll: {}", std::io::Error::last_os_error()),
            ),
        }
    }
}

/// Wake a wait on the descriptor (or weft's progress thread), from any thread.
///
/// # Safety
/// `w` a live worker.
#[no_mangle]
pub unsafe extern "C" fn weft_signal(w: *const weft_worker) -> weft_status {
    guard(|| {
        // SAFETY: the caller's promise.
        match unsafe { worker(w) } {
            Ok(w) => match w.signal.raise() {
                Ok(()) => WEFT_OK,
                Err(e) => fail(WEFT_ERR_ENGINE, format!("signal: {e}")),
            },
            Err(s) => s,
        }
    })
}

/// Stop the worker and free it (the others see this rank fail, as when the process dies;
/// `weft_leave` first for a departure they are told of). Null is fine. Under
/// `WEFT_THREAD_SINGLE`, from the creating thread; never from inside a callback.
///
/// # Safety
/// `w` null or a live worker, not used again after.
#[no_mangle]
pub unsafe extern "C" fn weft_finalize(w: *mut weft_worker) -> weft_status {
    guard(|| {
        if w.is_null() {
            return WEFT_OK;
        }
        {
            // SAFETY: the caller's promise.
            let wr = unsafe { &*w };
            if let Err(s) = wr.enter() {
                return s;
            }
            if let Style::Caller(c) = &wr.style {
                if c.in_callback.get() {
                    return fail(WEFT_ERR_THREAD, "weft_finalize from inside a callback");
                }
            }
        }
        // SAFETY: a worker from `weft_init`, given back once.
        let worker = unsafe { Box::from_raw(w) };
        match worker.style {
            Style::Caller(c) => match c.ep.stop() {
                Ok(_) => WEFT_OK,
                Err(e) => fail(WEFT_ERR_ENGINE, e),
            },
            Style::Threaded(mut t) => {
                t.stop.store(true, Ordering::Release);
                let _ = worker.signal.raise();
                match t.thread.take().map(JoinHandle::join) {
                    Some(Err(_)) => fail(WEFT_ERR_PANIC, "weft's progress thread panicked"),
                    _ => WEFT_OK,
                }
            }
        }
    })
}
