//! The peer list a process is given: `ID=ADDR,ID=ADDR,...`, checked as a whole before anything
//! listens or dials. A list naming an id twice would silently keep one address (and leave a
//! live member unreachable); one that leaves a member out would leave its failure unseen. Both
//! are refused here, naming the entries.

use super::BootstrapError;
use crate::NodeId;
use std::collections::HashMap;
use std::net::SocketAddr;

/// Where each member of a job listens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerList(HashMap<NodeId, SocketAddr>);

impl PeerList {
    /// `id`'s address.
    pub fn get(&self, id: NodeId) -> Option<SocketAddr> {
        self.0.get(&id).copied()
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, SocketAddr)> + '_ {
        self.0.iter().map(|(&id, &a)| (id, a))
    }

    /// Parse `ID=ADDR,...` (ids as `3` or `n3`; blank entries are skipped). `source_name` says
    /// where the list came from, for errors.
    pub fn parse(s: &str, source_name: &str) -> Result<Self, BootstrapError> {
        let mut peers: HashMap<NodeId, SocketAddr> = HashMap::new();
        for entry in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            // A long entry is shown by its start: an error does not repeat megabytes.
            let bad = |why: &str| BootstrapError::BadEntry {
                source_name: source_name.into(),
                entry: if entry.chars().count() > 64 {
                    let head: String = entry.chars().take(64).collect();
                    format!("{head}… ({} bytes)", entry.len())
                } else {
                    entry.into()
                },
                why: why.into(),
            };
            let (id, addr) = entry
                .split_once('=')
                .ok_or_else(|| bad("expected ID=ADDR"))?;
            let id = id.trim();
            let id = NodeId(
                id.strip_prefix('n')
                    .unwrap_or(id)
                    .parse()
                    .map_err(|_| bad("the id is not a number"))?,
            );
            let addr: SocketAddr = addr
                .trim()
                .parse()
                .map_err(|_| bad("the address is not IP:PORT"))?;
            if let Some(first) = peers.insert(id, addr) {
                return Err(BootstrapError::Duplicate {
                    source_name: source_name.into(),
                    id,
                    first: first.to_string(),
                    second: addr.to_string(),
                });
            }
        }
        Ok(Self(peers))
    }

    /// A list from known addresses.
    pub fn from_map(map: HashMap<NodeId, SocketAddr>) -> Self {
        Self(map)
    }

    /// Check that every member but `me` has an address.
    pub fn check_covers(
        &self,
        members: &[NodeId],
        me: NodeId,
        source_name: &str,
    ) -> Result<(), BootstrapError> {
        let missing: Vec<NodeId> = members
            .iter()
            .copied()
            .filter(|&m| m != me && !self.0.contains_key(&m))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(BootstrapError::Missing {
                source_name: source_name.into(),
                missing,
                members: members.len(),
            })
        }
    }

    /// The addresses of everyone but `me`.
    pub fn without(mut self, me: NodeId) -> HashMap<NodeId, SocketAddr> {
        self.0.remove(&me);
        self.0
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The list as `ID=ADDR,...`, in id order (what [`Self::parse`] reads back).
    pub fn to_line(&self) -> String {
        let mut v: Vec<_> = self.0.iter().collect();
        v.sort();
        v.iter()
            .map(|(id, addr)| format!("{}={addr}", id.0))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn duplicates_and_gaps_are_refused_by_name() {
        let ok = PeerList::parse("0=127.0.0.1:1, n1=127.0.0.1:2,,2=[::1]:3", "--peers").unwrap();
        assert_eq!(ok.len(), 3);
        let members: Vec<NodeId> = (0..3).map(NodeId).collect();
        ok.check_covers(&members, NodeId(0), "--peers").unwrap();
        match PeerList::parse("0=127.0.0.1:1,0=127.0.0.1:2", "--peers") {
            Err(BootstrapError::Duplicate { id, .. }) => assert_eq!(id, NodeId(0)),
            other => panic!("{other:?}"),
        }
        let gap = PeerList::parse("0=127.0.0.1:1,2=127.0.0.1:3", "--peers").unwrap();
        let five: Vec<NodeId> = (0..5).map(NodeId).collect();
        match gap.check_covers(&five, NodeId(0), "--peers") {
            Err(BootstrapError::Missing { missing, .. }) => {
                assert_eq!(missing, vec![NodeId(1), NodeId(3), NodeId(4)])
            }
            other => panic!("{other:?}"),
        }
        for bad in ["0", "x=127.0.0.1:1", "0=localhost", "0=127.0.0.1"] {
            assert!(
                matches!(
                    PeerList::parse(bad, "--peers"),
                    Err(BootstrapError::BadEntry { .. })
                ),
                "{bad}"
            );
        }
    }

    proptest! {
        /// Any list of distinct ids survives `to_line` and `parse`.
        #[test]
        fn a_list_round_trips(entries in proptest::collection::hash_map(0u64..10_000, (1u16.., 0u8..4), 0..40)) {
            let map: HashMap<NodeId, SocketAddr> = entries
                .iter()
                .map(|(&id, &(port, last))| (NodeId(id), SocketAddr::from(([127, 0, 0, last], port))))
                .collect();
            let list = PeerList::from_map(map);
            prop_assert_eq!(PeerList::parse(&list.to_line(), "test").unwrap(), list);
        }
    }
}
