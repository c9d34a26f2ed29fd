//! Status codes, their messages, and the calling thread's last error in words.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call returns: `WEFT_OK`, `WEFT_BUSY`, or a negative `WEFT_ERR_*`.
pub type weft_status = i32;

/// Done.
pub const WEFT_OK: weft_status = 0;
/// `weft_arm`: events or work are pending; call `weft_progress` before waiting.
pub const WEFT_BUSY: weft_status = 1;
/// A null pointer, a length without its buffer, a rank outside the job, an unknown
/// constant, or a call this kind of worker does not take.
pub const WEFT_ERR_INVALID: weft_status = -1;
/// The thread level forbids this call here: another thread under `WEFT_THREAD_SINGLE`, an
/// overlapping call under `WEFT_THREAD_SERIALIZED`, or `weft_progress` inside a callback.
pub const WEFT_ERR_THREAD: weft_status = -2;
/// The launcher's environment or the address exchange failed (`weft_last_error` names the
/// variable).
pub const WEFT_ERR_LAUNCH: weft_status = -3;
/// The node could not start, or its reactor failed.
pub const WEFT_ERR_ENGINE: weft_status = -4;
/// The worker has stopped: nothing more will come.
pub const WEFT_ERR_GONE: weft_status = -5;
/// `weft_wait`: nothing came within the time given.
pub const WEFT_ERR_TIMEOUT: weft_status = -6;
/// A bug in weft, caught at the boundary (no panic crosses it).
pub const WEFT_ERR_PANIC: weft_status = -7;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Note `what` as the calling thread's last error; returns `code`.
pub(crate) fn fail(code: weft_status, what: impl std::fmt::Display) -> weft_status {
    let text = CString::new(what.to_string().replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = text);
    code
}

/// Run `f`, turning a panic into `WEFT_ERR_PANIC` (with its message as the last error).
pub(crate) fn guard(f: impl FnOnce() -> weft_status) -> weft_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(s) => s,
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            fail(WEFT_ERR_PANIC, format!("weft panicked: {why}"))
        }
    }
}

/// What `status` means: a static string (never null, never to be freed).
#[no_mangle]
pub extern "C" fn weft_strerror(status: weft_status) -> *const c_char {
    let s: &'static [u8] = match status {
        WEFT_OK => b"ok\0",
        WEFT_BUSY => b"events or work pending: progress before waiting\0",
        WEFT_ERR_INVALID => b"invalid argument\0",
        WEFT_ERR_THREAD => b"not allowed from this thread at this thread level\0",
        WEFT_ERR_LAUNCH => b"the launcher's environment or the address exchange failed\0",
        WEFT_ERR_ENGINE => b"the node could not start or its reactor failed\0",
        WEFT_ERR_GONE => b"the worker has stopped\0",
        WEFT_ERR_TIMEOUT => b"timed out\0",
        WEFT_ERR_PANIC => b"a bug in weft (caught)\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast()
}

/// The calling thread's last error, in words (empty if none): owned by weft, valid until
/// this thread's next failing call.
#[no_mangle]
pub extern "C" fn weft_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
