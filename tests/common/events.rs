//! Waiting for what in-process nodes report, for the engine's integration tests.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use weft::engine::reactor::NodeEvent;
use weft::proto::Event;
use weft::NodeId;

/// Wait for events until `done` says so or the deadline passes; returns what was seen.
pub fn collect(
    events: &Receiver<(NodeId, NodeEvent)>,
    secs: u64,
    mut done: impl FnMut(&[(NodeId, NodeEvent)]) -> bool,
) -> Vec<(NodeId, NodeEvent)> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    while Instant::now() < deadline && !done(&seen) {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(20)) {
            seen.push(e);
        }
    }
    seen
}

/// Wait up to `secs` for some node to report `Done`; fail with `context` and everything seen
/// if none does.
pub fn wait_done(events: &Receiver<(NodeId, NodeEvent)>, secs: u64, context: &str) {
    let done = |s: &[(NodeId, NodeEvent)]| {
        s.iter()
            .any(|(_, e)| *e == NodeEvent::Protocol(Event::Done))
    };
    let seen = collect(events, secs, done);
    assert!(done(&seen), "{context}: {seen:?}");
}

/// How many of `seen`'s refusals, reported by any node (`by` None) or by `by`, say `what`.
pub fn refusals(seen: &[(NodeId, NodeEvent)], by: Option<NodeId>, what: &str) -> usize {
    seen.iter()
        .filter(|(who, e)| {
            by.is_none_or(|b| b == *who)
                && matches!(e, NodeEvent::Refused(r) if r.to_string().contains(what))
        })
        .count()
}
