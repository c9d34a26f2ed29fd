//! How messages reach a peer: over TCP (the reactor's connections); between nodes of one
//! process, through the in-process exchange ([`inproc`]), where a message moves as the value
//! the protocol built; between processes of one host, through shared-memory rings ([`shm`]). The protocols and the events they see are the same on every link, and
//! both backends drive each.

pub mod inproc;
pub mod shm;
mod spsc;

use serde::Serialize;
use std::fmt;

/// Which links nodes use to reach their peers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The fastest that reaches each peer: in-process delivery between nodes of one process,
    /// shared memory between processes of one host, TCP otherwise. TCP for all when connections are released after every message
    /// (`ReactorOptions::reconnect`, which only means something over connections), or when
    /// reactors have descriptor tables of their own (`ReactorOptions::own_descriptors`: a
    /// reactor could not reach another's waker).
    #[default]
    Auto,
    /// TCP for every peer, also between nodes of one process (over loopback).
    Tcp,
    /// In-process delivery between nodes of one process (TCP to peers elsewhere).
    Inproc,
    /// Shared-memory links to every peer on this host, also between nodes of one process
    /// (TCP to peers elsewhere).
    Shm,
}

impl Transport {
    /// The transport `requested`, else the one `WEFT_TRANSPORT` names, else [`Transport::Auto`].
    pub fn chosen(requested: Option<Transport>) -> Result<Transport, String> {
        if let Some(t) = requested {
            return Ok(t);
        }
        match std::env::var("WEFT_TRANSPORT") {
            Ok(v) if v.trim().is_empty() => Ok(Transport::Auto),
            Ok(v) => v
                .trim()
                .parse()
                .map_err(|e| format!("WEFT_TRANSPORT={v:?}: {e}")),
            Err(_) => Ok(Transport::Auto),
        }
    }

    /// Whether nodes of one process talk through the in-process exchange, given whether
    /// connections are released after every message and whether reactors have descriptor
    /// tables of their own; an error for a forced in-process transport that cannot be.
    pub fn in_process(self, reconnect: bool, own_descriptors: bool) -> Result<bool, String> {
        match self {
            Transport::Auto => Ok(!reconnect && !own_descriptors),
            Transport::Inproc if own_descriptors => Err(
                "in-process delivery needs reactors that share a descriptor table (own \
                 descriptors are on)"
                    .into(),
            ),
            Transport::Inproc => Ok(true),
            Transport::Tcp | Transport::Shm => Ok(false),
        }
    }

    /// Whether a node reaches peers of other processes on its host through shared memory,
    /// given the same as [`Self::in_process`]; an error for a forced shared-memory transport
    /// that cannot be. `one_process`: the node's peers are all nodes of its own process,
    /// which [`Transport::Auto`] reaches in-process instead.
    pub fn shared_memory(
        self,
        reconnect: bool,
        own_descriptors: bool,
        one_process: bool,
    ) -> Result<bool, String> {
        match self {
            Transport::Auto => Ok(!reconnect && !own_descriptors && !one_process),
            Transport::Shm if reconnect => Err(
                "a shared-memory link is kept for the job: connections released after every                  message (reconnect) are TCP's"
                    .into(),
            ),
            Transport::Shm => Ok(true),
            Transport::Tcp | Transport::Inproc => Ok(false),
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Transport::Auto),
            "tcp" => Ok(Transport::Tcp),
            "inproc" => Ok(Transport::Inproc),
            "shm" => Ok(Transport::Shm),
            _ => Err(format!("{s:?} is none of auto, tcp, inproc, shm")),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Tcp => "tcp",
            Transport::Inproc => "inproc",
            Transport::Shm => "shm",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_is_named_as_the_command_line_names_it() {
        for t in [
            Transport::Auto,
            Transport::Tcp,
            Transport::Inproc,
            Transport::Shm,
        ] {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
        assert!("shm2"
            .parse::<Transport>()
            .unwrap_err()
            .contains("auto, tcp, inproc, shm"));
        assert_eq!(Transport::Auto.in_process(false, false), Ok(true));
        assert_eq!(Transport::Auto.in_process(true, false), Ok(false));
        assert_eq!(Transport::Auto.in_process(false, true), Ok(false));
        assert_eq!(Transport::Inproc.in_process(true, false), Ok(true));
        assert!(Transport::Inproc.in_process(false, true).is_err());
        assert_eq!(Transport::Tcp.in_process(false, false), Ok(false));
        assert_eq!(Transport::Shm.in_process(false, false), Ok(false));
        assert_eq!(Transport::Auto.shared_memory(false, false, false), Ok(true));
        assert_eq!(Transport::Auto.shared_memory(false, false, true), Ok(false));
        assert_eq!(Transport::Auto.shared_memory(true, false, false), Ok(false));
        assert_eq!(Transport::Shm.shared_memory(false, true, true), Ok(true));
        assert!(Transport::Shm.shared_memory(true, false, false).is_err());
        assert_eq!(Transport::Tcp.shared_memory(false, false, false), Ok(false));
        assert_eq!(
            Transport::Inproc.shared_memory(false, false, false),
            Ok(false)
        );
    }
}
