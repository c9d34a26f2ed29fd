//! The per-message CPU cost `c` of the contention model, measured on the engine: a relay ring
//! of in-process nodes with many tokens in flight, so every reactor is busy, and
//! `c = window × reactors / messages`.

use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::proto::relay::Relay;
use crate::proto::Event;
use crate::transport::{Cluster, NodeOptions};
use serde::Serialize;
use std::time::Duration;

/// One relay measurement.
#[derive(Clone, Debug, Serialize)]
pub struct RelayRun {
    /// Nodes in the ring.
    pub nodes: u32,
    /// Tokens in flight.
    pub tokens: u32,
    /// Reactor threads (each on its own core).
    pub reactors: u32,
    /// Messages in the measured window.
    pub messages: u64,
    /// The window, µs.
    pub window_us: f64,
    /// CPU per message: window × reactors / messages, µs.
    pub c_us: f64,
    /// Backend.
    pub backend: String,
}

/// Run `tokens` tokens for `laps` laps around `nodes` nodes.
pub fn per_message_cost(
    nodes: u32,
    tokens: u32,
    laps: u64,
    opts: &NodeOptions,
) -> Result<RelayRun, EngineError> {
    if nodes < 2 || tokens == 0 || tokens > nodes {
        return Err(EngineError::Config(
            "the relay needs at least 2 nodes and 1 to `nodes` tokens".into(),
        ));
    }
    let opts = opts.clone();
    let reactors = opts
        .reactors
        .unwrap_or_else(crate::engine::online_cpus)
        .clamp(1, nodes as usize) as u32;
    let n = nodes as u64;
    let cluster = Cluster::start(nodes as usize, opts, move |i, _| {
        Relay::new(i as u64, n, tokens as u64, laps)
    })?;
    let mut done = 0;
    while done < tokens {
        match cluster.events.recv_timeout(Duration::from_secs(60)) {
            Ok((_, NodeEvent::Protocol(Event::Done))) => done += 1,
            Ok((_, NodeEvent::Suspect(p))) => {
                return Err(EngineError::Io(std::io::Error::other(format!(
                    "lost {p} during the relay"
                ))))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(EngineError::Io(std::io::Error::other(
                    "the relay stalled for 60 s",
                )))
            }
        }
    }
    let backend = cluster.backend_name();
    let relays = cluster.stop_all()?;
    let start = relays.iter().filter_map(|r| r.warm_at()).min();
    let end = relays.iter().filter_map(|r| r.done_at()).max();
    let (Some(start), Some(end)) = (start, end) else {
        return Err(EngineError::Io(std::io::Error::other(
            "the relay recorded no window",
        )));
    };
    let messages = tokens as u64 * relays[0].timed_hops();
    let window = end.since(start).as_secs_f64() * 1e6;
    Ok(RelayRun {
        nodes,
        tokens,
        reactors,
        messages,
        window_us: window,
        c_us: window * reactors as f64 / messages.max(1) as f64,
        backend,
    })
}
