//! Neighborhood storage over the engine: real nodes on loopback, real kills.

use weft::prelude::NodeEvent;
use weft::storage::placement::Placement;
use weft::storage::{Scheme, StorageConfig};
use weft::transport::storage::{Checkpointer, StoreError};
use weft::NodeId;

fn state(rank: u64, version: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 131 + rank * 7 + version) as u8)
        .collect()
}

#[test]
fn states_survive_half_of_each_neighborhood_and_fail_cleanly_beyond() {
    let cfg = StorageConfig {
        stripe: 64 << 10,
        seed: 5,
        ..StorageConfig::default()
    };
    let mut job: Vec<Option<Checkpointer>> =
        Checkpointer::on_loopback(8, &Default::default(), &cfg)
            .expect("nodes start")
            .into_iter()
            .map(Some)
            .collect();
    // Two checkpoints: the second replaces the first in every rebuild.
    for version in [1, 2] {
        for node in job.iter().flatten() {
            node.protect(node.id().0, state(node.id().0, version, 300_000));
        }
        for node in job.iter().flatten() {
            let c = node.checkpoint(version).expect("checkpoint");
            assert_eq!(c.lost, 0);
        }
    }
    let view: Vec<NodeId> = (0..8).map(NodeId).collect();
    let p = Placement::new(Scheme::Ida, &view, cfg.seed, 0);
    let group = p.groups()[0].clone();
    assert_eq!(
        group.len(),
        4,
        "8 processes: neighborhoods of N_0 = 3, two groups of 4"
    );
    // Half of one neighborhood dies: both of its lost states come back.
    let (a, b) = (group[0].0 as usize, group[1].0 as usize);
    job[a].take().unwrap().stop().unwrap();
    job[b].take().unwrap().stop().unwrap();
    let survivor = job.iter().flatten().next().unwrap();
    for v in [a, b] {
        let data = survivor.recover(v as u64, None).expect("rebuilt");
        assert_eq!(&data[..], &state(v as u64, 2, 300_000)[..], "state {v}");
    }
    // A third member of that neighborhood dies: its states are an error, never data.
    let c = group[2].0 as usize;
    job[c].take().unwrap().stop().unwrap();
    let survivor = job.iter().flatten().next().unwrap();
    match survivor.recover(a as u64, None) {
        Err(StoreError::Unrecoverable { vid, .. }) => assert_eq!(vid, a as u64),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn requests_out_of_order_are_refused_with_a_reason() {
    let job = Checkpointer::on_loopback(3, &Default::default(), &StorageConfig::default())
        .expect("nodes start");
    // Nothing taken yet: a recovery is refused, not left waiting.
    match job[0].recover(1, None) {
        Err(StoreError::Rejected(why)) => assert!(why.contains("no checkpoint"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    job[0].protect(0, vec![1u8; 5000]);
    job[0].checkpoint(4).expect("checkpoint 4");
    // Not newer than the last: refused.
    match job[0].checkpoint(4) {
        Err(StoreError::Rejected(why)) => assert!(why.contains("not newer"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A state nobody protected: an error, never bytes.
    assert!(matches!(
        job[1].recover(99, Some(4)),
        Err(StoreError::Rejected(_)) | Err(StoreError::Unrecoverable { .. })
    ));
}

/// What the node tells beside the answers is not swallowed: a holder that stops is heard of
/// as a suspicion, after the calls that waited past it.
#[test]
fn a_stopped_holder_is_news_not_silence() {
    let mut job = Checkpointer::on_loopback(3, &Default::default(), &StorageConfig::default())
        .expect("nodes start");
    job[0].protect(0, vec![3u8; 50_000]);
    let c = job[0].checkpoint(1).expect("checkpoint");
    assert_eq!(c.lost, 0, "every holder alive");
    let gone = job.pop().expect("three nodes");
    let gone_id = gone.id();
    gone.stop().expect("stop");
    loop {
        match job[0].next_news(std::time::Duration::from_secs(20)) {
            Ok(NodeEvent::Suspect(p)) if p == gone_id => break,
            Ok(_) => {}
            Err(e) => panic!("no word of {gone_id} stopping: {e}"),
        }
    }
    // It is still usable, and its state still comes back.
    let data = job[0].recover(0, None).expect("rebuilt with a holder gone");
    assert_eq!(&data[..], &[3u8; 50_000][..]);
}
