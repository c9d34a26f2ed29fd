//! Rules of one Robust-BSP processor, without a network: exclusion, ownership, the
//! checkpoint's encoding, stale pieces. The runs with kills are in `crate::sim` (its
//! `bsp_node_tests`), which may drive this layer.

use super::*;
use crate::bsp::app::PrefixSum;

/// Processor 2 of 4 alone, started: its first checkpoint under way.
fn started() -> (BspNode, Outbox<BspMsg, BspEvent>) {
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    let cfg = BspConfig {
        virt: 8,
        supersteps: 4,
        safe_every: 2,
        alpha: 0.25,
        storage: StorageConfig::default(),
    };
    let mut node = BspNode::new(NodeId(2), &all, &PrefixSum, cfg);
    let mut out = Outbox::new();
    node.on_start(Time::ZERO, &mut out);
    (node, out)
}

#[test]
fn a_processor_the_others_hold_dead_stops() {
    let (mut node, mut out) = started();
    out.drain().for_each(drop);
    node.on_message(
        Time::ZERO,
        NodeId(0),
        BspMsg::Known {
            dead: vec![2],
            known: None,
            safe: None,
            backtracks: 0,
        },
        &mut out,
    );
    let events: Vec<Action<BspMsg, BspEvent>> = out.drain().collect();
    assert!(events.contains(&Action::Report(BspEvent::Excluded)));
    // Whatever comes next is ignored.
    node.on_message(
        Time::ZERO,
        NodeId(1),
        BspMsg::Batch {
            epoch: 0,
            step: 0,
            mail: Vec::new(),
        },
        &mut out,
    );
    assert!(out.is_empty());
}

#[test]
fn a_virtual_processor_moves_only_when_its_owner_dies() {
    let all: Vec<NodeId> = (0..4).map(NodeId).collect();
    let none = BTreeSet::new();
    let one: BTreeSet<NodeId> = [NodeId(1)].into();
    let two: BTreeSet<NodeId> = [NodeId(1), NodeId(2)].into();
    for vid in 0..16 {
        let home = BspNode::owner(&all, &none, 16, vid).expect("an owner");
        assert_eq!(home, NodeId(vid / 4), "blocks of V / n");
        let after = BspNode::owner(&all, &one, 16, vid).expect("an owner");
        let later = BspNode::owner(&all, &two, 16, vid).expect("an owner");
        if home != NodeId(1) {
            assert_eq!(after, home);
        } else {
            assert_eq!(after, NodeId(2), "the ring's next live processor adopts");
        }
        if home == NodeId(1) || home == NodeId(2) {
            assert_eq!(later, NodeId(3));
        } else {
            assert_eq!(later, home);
        }
    }
    let everyone: BTreeSet<NodeId> = all.iter().copied().collect();
    assert_eq!(BspNode::owner(&all, &everyone, 16, 3), None);
}

#[test]
fn a_checkpointed_state_decodes_to_itself_and_a_torn_one_to_nothing() {
    let b = encode(7, &[(1, 2), (3, 4)]);
    assert_eq!(decode(&b), Some((7, vec![(1, 2), (3, 4)])));
    assert_eq!(decode(&b[..b.len() - 1]), None);
    assert_eq!(decode(&b[..4]), None);
}

#[test]
fn a_piece_of_an_older_epoch_is_refused_once_a_failure_is_known() {
    let (mut node, mut out) = started();
    node.on_suspect(Time::ZERO, NodeId(3), &mut out);
    out.drain().for_each(drop);
    assert_eq!(node.epoch(), 1);
    let key = crate::proto::storage::PieceKey {
        vid: 0,
        version: version(0, 1),
        stripe: 0,
        slot: 1,
    };
    let meta = crate::proto::storage::PieceMeta {
        scheme: 0,
        n: 3,
        m: 2,
        state_len: 8,
        stripe_len: 4096,
        crc32c: 0,
        stripe_crc: 0,
        safe: false,
    };
    let put = StoreMsg::Put {
        key,
        meta,
        body: crate::buf::Payload::default(),
    };
    node.on_message(Time::ZERO, NodeId(0), BspMsg::Store(put), &mut out);
    let sent: Vec<Action<BspMsg, BspEvent>> = out.drain().collect();
    assert_eq!(
        sent,
        vec![Action::Send {
            to: NodeId(0),
            msg: BspMsg::Store(StoreMsg::Refused { key })
        }]
    );
}
