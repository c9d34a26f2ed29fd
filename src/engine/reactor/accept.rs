//! What a failed `accept` means for the listener. A reactor hosts many nodes: no accept
//! error may end it, and none may make it spin.

use std::io;
use std::time::Duration;

/// How long a listener rests after running out of descriptors or memory before it accepts
/// again: long enough not to spin on a shortage that lasts (the connections wait in the
/// backlog meanwhile), short enough that a dialer hardly notices one that passes.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// What to do after an `accept` failed with `e`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AcceptFailure {
    /// That one connection failed before we took it (accept(2): Linux passes a new socket's
    /// pending network error to `accept`, and asks callers to retry as after `EAGAIN`).
    /// Accept the next one at once.
    NextConnection,
    /// The reactor cannot take connections now (out of descriptors or memory) or the
    /// listener is broken. The connections wait in the backlog; try again after
    /// [`ACCEPT_RETRY`], and report it once until an accept succeeds.
    Rest,
}

pub(super) fn classify(e: &io::Error) -> AcceptFailure {
    match e.raw_os_error() {
        Some(
            libc::ECONNABORTED
            | libc::EPROTO
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH
            | libc::EPERM,
        ) => AcceptFailure::NextConnection,
        _ => AcceptFailure::Rest,
    }
}

/// Whether `e` says this process (`EMFILE`) or the system (`ENFILE`) has no descriptor free:
/// a shortage that closing one connection ends.
pub(super) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortage_rests_the_listener_and_a_lost_connection_does_not() {
        let os = io::Error::from_raw_os_error;
        for e in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOBUFS,
            libc::ENOMEM,
            libc::EINVAL,
        ] {
            assert_eq!(classify(&os(e)), AcceptFailure::Rest, "{e}");
        }
        for e in [
            libc::ECONNABORTED,
            libc::EPROTO,
            libc::ENETUNREACH,
            libc::EPERM,
        ] {
            assert_eq!(classify(&os(e)), AcceptFailure::NextConnection, "{e}");
        }
    }
}
