//! How messages reach a peer: over TCP (the reactor's connections), or, between nodes of one
//! process, through the in-process exchange ([`inproc`]), where a message moves as the value
//! the protocol built. The protocols and the events they see are the same on every link, and
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
    /// TCP otherwise. TCP for all when connections are released after every message
    /// (`ReactorOptions::reconnect`, which only means something over connections), or when
    /// reactors have descriptor tables of their own (`ReactorOptions::own_descriptors`: a
    /// reactor could not reach another's waker).
    #[default]
    Auto,
    /// TCP for every peer, also between nodes of one process (over loopback).
    Tcp,
    /// In-process delivery between nodes of one process (TCP to peers elsewhere).
    Inproc,
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
            Transport::Tcp => Ok(false),
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
            _ => Err(format!("{s:?} is none of auto, tcp, inproc")),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Tcp => "tcp",
            Transport::Inproc => "inproc",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_is_named_as_the_command_line_names_it() {
        for t in [Transport::Auto, Transport::Tcp, Transport::Inproc] {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
        assert!("shm2"
            .parse::<Transport>()
            .unwrap_err()
            .contains("auto, tcp, inproc"));
        assert_eq!(Transport::Auto.in_process(false, false), Ok(true));
        assert_eq!(Transport::Auto.in_process(true, false), Ok(false));
        assert_eq!(Transport::Auto.in_process(false, true), Ok(false));
        assert_eq!(Transport::Inproc.in_process(true, false), Ok(true));
        assert!(Transport::Inproc.in_process(false, true).is_err());
        assert_eq!(Transport::Tcp.in_process(false, false), Ok(false));
    }
}
