//! The storage protocol among in-memory processes: FIFO delivery, kills that every survivor
//! suspects at once, pieces damaged in place.

use super::*;
use crate::proto::Action;
use crate::rng::SimRng;
use std::collections::VecDeque;

struct Net {
    nodes: Vec<Option<Storage>>,
    queue: VecDeque<(NodeId, NodeId, StoreMsg)>,
    events: Vec<(NodeId, StorageEvent)>,
}

impl Net {
    fn new(n: u64, cfg: StorageConfig) -> Self {
        let view: Vec<NodeId> = (0..n).map(NodeId).collect();
        Self {
            nodes: view
                .iter()
                .map(|&id| Some(Storage::new(id, &view, cfg.clone())))
                .collect(),
            queue: VecDeque::new(),
            events: Vec::new(),
        }
    }

    fn apply(&mut self, from: NodeId, mut out: Outbox<StoreMsg, StorageEvent>) {
        for a in out.drain() {
            match a {
                Action::Send { to, msg } => self.queue.push_back((from, to, msg)),
                Action::Report(e) => self.events.push((from, e)),
                _ => {}
            }
        }
    }

    fn request(&mut self, at: u64, req: Request) {
        let mut out = Outbox::new();
        if let Some(s) = self.nodes[at as usize].as_mut() {
            s.request(req, &mut out);
        }
        self.apply(NodeId(at), out);
        self.run();
    }

    /// Deliver everything; a message to a dead process makes its sender suspect it, as a
    /// refused dial does over the engine.
    fn run(&mut self) {
        while let Some((from, to, msg)) = self.queue.pop_front() {
            let mut out = Outbox::new();
            match self.nodes.get_mut(to.0 as usize).and_then(Option::as_mut) {
                Some(s) => {
                    s.on_message(Time::ZERO, from, msg, &mut out);
                    self.apply(to, out);
                }
                None => {
                    if let Some(s) = self.nodes[from.0 as usize].as_mut() {
                        s.on_suspect(Time::ZERO, to, &mut out);
                    }
                    self.apply(from, out);
                }
            }
        }
    }

    /// Kill without telling anyone: survivors learn it when they try to reach the victims.
    fn kill_quietly(&mut self, victims: &[u64]) {
        for &v in victims {
            self.nodes[v as usize] = None;
        }
    }

    fn kill(&mut self, victims: &[u64]) {
        for &v in victims {
            self.nodes[v as usize] = None;
        }
        for i in 0..self.nodes.len() {
            for &v in victims {
                let mut out = Outbox::new();
                if let Some(s) = self.nodes[i].as_mut() {
                    s.on_suspect(Time::ZERO, NodeId(v), &mut out);
                }
                self.apply(NodeId(i as u64), out);
            }
        }
        self.run();
    }

    fn take(&mut self) -> Vec<(NodeId, StorageEvent)> {
        std::mem::take(&mut self.events)
    }

    /// Every process protects a state of its own and checkpoints `version`; the states.
    fn checkpoint_all(&mut self, version: u64, sizes: &[usize], rng: &mut SimRng) -> Vec<Bytes> {
        self.safe_state_all(version, 0, sizes, rng)
    }

    /// [`Net::checkpoint_all`] as a SafeState with `replicas` (none: LOCALSTORAGE only).
    fn safe_state_all(
        &mut self,
        version: u64,
        replicas: usize,
        sizes: &[usize],
        rng: &mut SimRng,
    ) -> Vec<Bytes> {
        let n = self.nodes.len();
        let states: Vec<Bytes> = (0..n)
            .map(|i| {
                let len = sizes[i % sizes.len()];
                Bytes::from((0..len).map(|_| rng.next_u64() as u8).collect::<Vec<u8>>())
            })
            .collect();
        for (i, data) in states.iter().enumerate() {
            if self.nodes[i].is_none() {
                continue;
            }
            let vid = i as u64;
            self.request(
                vid,
                Request::Protect {
                    vid,
                    data: data.clone(),
                },
            );
            let req = if replicas == 0 {
                Request::Checkpoint { version }
            } else {
                Request::GlobalStorage { version, replicas }
            };
            self.request(vid, req);
        }
        let done = self
            .take()
            .into_iter()
            .filter(|(_, e)| matches!(e, StorageEvent::Checkpointed { version: v, .. } if *v == version))
            .count();
        assert_eq!(
            done,
            self.nodes.iter().flatten().count(),
            "every live process checkpointed"
        );
        states
    }

    fn recover(&mut self, at: u64, vid: u64) -> StorageEvent {
        self.request(at, Request::Recover { vid, version: None });
        let mut ev = self.take();
        assert_eq!(ev.len(), 1, "one answer: {ev:?}");
        ev.remove(0).1
    }

    fn node(&mut self, i: u64) -> &mut Storage {
        self.nodes[i as usize].as_mut().expect("alive")
    }
}

fn cfg(scheme: Scheme) -> StorageConfig {
    StorageConfig {
        scheme,
        stripe: 1000,
        seed: 11,
        ..StorageConfig::default()
    }
}

fn recovered(e: &StorageEvent) -> Option<&Bytes> {
    match e {
        StorageEvent::Recovered { data, .. } => Some(data),
        _ => None,
    }
}

/// Neighborhood members of `vid` other than its own process.
fn neighbors(net: &mut Net, vid: u64) -> Vec<u64> {
    let p = net
        .node(vid)
        .snapshots
        .values()
        .next_back()
        .unwrap()
        .placement
        .clone();
    let (holders, _) = p.holders(vid).unwrap();
    holders.iter().map(|h| h.0).filter(|&h| h != vid).collect()
}

#[test]
fn ida_rebuilds_every_state_after_losing_half_of_each_neighborhood() {
    let mut rng = SimRng::new(1);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    let states = net.checkpoint_all(1, &[0, 1, 999, 1000, 1001, 4321], &mut rng);
    // Two of each neighborhood of four die (16 processes: N_0 = 4, m = 2).
    let p = net.node(0).snapshots[&1].placement.clone();
    let victims: Vec<u64> = p
        .groups()
        .iter()
        .flat_map(|g| g[..2].iter().map(|x| x.0))
        .collect();
    net.kill(&victims);
    for &v in &victims {
        let at = (0..16).find(|x| !victims.contains(x)).unwrap();
        let e = net.recover(at, v);
        assert_eq!(recovered(&e), Some(&states[v as usize]), "state {v}: {e:?}");
    }
}

#[test]
fn beyond_half_a_neighborhood_is_an_error_not_data() {
    let mut rng = SimRng::new(2);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    net.checkpoint_all(1, &[3000], &mut rng);
    let mut victims = neighbors(&mut net, 5);
    victims.push(5);
    net.kill(&victims);
    let at = (0..16).find(|x| !victims.contains(x)).unwrap();
    let e = net.recover(at, 5);
    assert!(
        matches!(e, StorageEvent::Unrecoverable { vid: 5, .. }),
        "{e:?}"
    );
}

#[test]
fn a_damaged_piece_is_skipped_and_another_fetched() {
    let mut rng = SimRng::new(3);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    let states = net.checkpoint_all(1, &[2500], &mut rng);
    let others = neighbors(&mut net, 7);
    net.kill(&[7]);
    // Flip a byte in every piece one survivor holds for state 7: its CRC no longer matches.
    let holder = net.node(others[0]);
    for (k, (_, body)) in holder.held.iter_mut().filter(|(k, _)| k.vid == 7) {
        let mut v = body.to_vec();
        let at = k.stripe as usize % v.len();
        v[at] ^= 0x40;
        *body = Payload::from_bytes(Bytes::from(v));
    }
    // Asked from outside the neighborhood, holders go by slot: the damaged one is asked first.
    let outside = (0..16).find(|x| *x != 7 && !others.contains(x)).unwrap();
    let e = net.recover(outside, 7);
    assert_eq!(recovered(&e), Some(&states[7]), "{e:?}");
}

#[test]
fn a_piece_altered_with_a_matching_crc_fails_the_stripe_check_never_gives_wrong_data() {
    let mut rng = SimRng::new(4);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    net.checkpoint_all(1, &[800], &mut rng);
    let others = neighbors(&mut net, 9);
    net.kill(&[9]);
    // Every surviving piece of state 9 is altered and re-checksummed, as a lying holder would.
    for &h in &others {
        for (_, (meta, body)) in net.node(h).held.iter_mut().filter(|(k, _)| k.vid == 9) {
            let mut v = body.to_vec();
            if let Some(b) = v.first_mut() {
                *b ^= 1;
            }
            meta.crc32c = crc32c::crc32c(&v);
            *body = Payload::from_bytes(Bytes::from(v));
        }
    }
    let e = net.recover(others[0], 9);
    match e {
        StorageEvent::Unrecoverable { why, .. } => assert!(why.contains("CRC"), "{why}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn partner_and_xor_rebuild_one_loss_and_xor_refuses_two_in_a_set() {
    for scheme in [Scheme::Partner, Scheme::Xor { set: 8 }] {
        let mut rng = SimRng::new(5);
        let mut net = Net::new(16, cfg(scheme));
        let states = net.checkpoint_all(1, &[2999, 10, 0, 3001], &mut rng);
        net.kill(&[3, 12]);
        for v in [3u64, 12] {
            let e = net.recover(5, v);
            assert_eq!(
                recovered(&e),
                Some(&states[v as usize]),
                "{scheme:?} {v}: {e:?}"
            );
        }
    }
    let mut rng = SimRng::new(6);
    let mut net = Net::new(16, cfg(Scheme::Xor { set: 8 }));
    net.checkpoint_all(1, &[1500], &mut rng);
    net.kill(&[2, 4]);
    let e = net.recover(0, 2);
    assert!(matches!(e, StorageEvent::Unrecoverable { .. }), "{e:?}");
}

#[test]
fn survivors_checkpoint_again_over_the_smaller_view_and_recover_from_it() {
    let mut rng = SimRng::new(7);
    let mut net = Net::new(12, cfg(Scheme::Ida));
    net.checkpoint_all(1, &[1700], &mut rng);
    net.kill(&[0, 1, 2]);
    let states = net.checkpoint_all(2, &[2100], &mut rng);
    let p = net.node(5).snapshots[&2].placement.clone();
    assert_eq!(
        p.view.len(),
        9,
        "the new neighborhoods are drawn over the survivors"
    );
    let victim = 4;
    net.kill(&[victim]);
    let e = net.recover(6, victim);
    assert_eq!(recovered(&e), Some(&states[victim as usize]), "{e:?}");
}

#[test]
fn strangers_and_pieces_over_quota_are_refused_and_hold_no_memory() {
    let mut net = Net::new(
        4,
        StorageConfig {
            quota: 4096,
            ..cfg(Scheme::Ida)
        },
    );
    let key = PieceKey {
        vid: 99,
        version: 1,
        stripe: 0,
        slot: 0,
    };
    let meta = PieceMeta {
        scheme: 0,
        n: 2,
        m: 1,
        state_len: 3000,
        stripe_len: 1000,
        crc32c: 0,
        stripe_crc: 0,
        safe: false,
    };
    let body = Payload::from_bytes(Bytes::from(vec![1u8; 3000]));
    let mut out = Outbox::new();
    let put = |key, body: &Payload| StoreMsg::Put {
        key,
        meta,
        body: body.clone(),
    };
    net.node(0)
        .on_message(Time::ZERO, NodeId(1234), put(key, &body), &mut out);
    assert_eq!(
        net.node(0).held_bytes(),
        0,
        "a stranger's piece is not kept"
    );
    net.node(0)
        .on_message(Time::ZERO, NodeId(1), put(key, &body), &mut out);
    let k2 = PieceKey { stripe: 1, ..key };
    net.node(0)
        .on_message(Time::ZERO, NodeId(1), put(k2, &body), &mut out);
    assert_eq!(
        net.node(0).held_bytes(),
        3000,
        "the second piece would pass the quota"
    );
    let refused = out
        .drain()
        .filter(|a| {
            matches!(
                a,
                Action::Send {
                    msg: StoreMsg::Refused { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(refused, 2);
}

#[test]
fn holders_keep_two_versions_and_free_the_older() {
    let mut rng = SimRng::new(8);
    let mut net = Net::new(8, cfg(Scheme::Ida));
    net.checkpoint_all(1, &[4000], &mut rng);
    let one = net.node(3).held_bytes();
    net.checkpoint_all(2, &[4000], &mut rng);
    net.checkpoint_all(3, &[4000], &mut rng);
    assert_eq!(net.node(3).held_bytes(), 2 * one);
    assert!(net.node(3).held.keys().all(|k| k.version >= 2));
}

#[test]
fn a_holder_that_died_unnoticed_is_found_out_and_another_asked() {
    let mut rng = SimRng::new(9);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    let states = net.checkpoint_all(1, &[3500], &mut rng);
    let others = neighbors(&mut net, 6);
    net.kill_quietly(&[6, others[0]]);
    let outside = (0..16).find(|x| *x != 6 && !others.contains(x)).unwrap();
    let e = net.recover(outside, 6);
    assert_eq!(recovered(&e), Some(&states[6]), "{e:?}");
}

#[test]
fn an_xor_fold_through_a_member_that_died_unnoticed_fails_at_the_requester() {
    let mut rng = SimRng::new(10);
    let mut net = Net::new(16, cfg(Scheme::Xor { set: 8 }));
    net.checkpoint_all(1, &[2500], &mut rng);
    // Two of set 0..8 die; only the hop before the second finds out, when it forwards.
    net.kill_quietly(&[1, 6]);
    let e = net.recover(2, 1);
    assert!(
        matches!(e, StorageEvent::Unrecoverable { vid: 1, .. }),
        "{e:?}"
    );
}

#[test]
fn a_discarded_dispersal_makes_way_for_the_next_checkpoint_and_frees_its_pieces() {
    // A job rolls back while a checkpoint is still dispersing (its holders' confirmations on
    // their way): the discard drops it, so the next checkpoint is taken, not refused.
    let mut net = Net::new(8, cfg(Scheme::Ida));
    let mut out = Outbox::new();
    let s = net.node(2);
    s.request(
        Request::Protect {
            vid: 2,
            data: Bytes::from(vec![5u8; 3000]),
        },
        &mut out,
    );
    s.request(Request::Checkpoint { version: 0 }, &mut out);
    assert!(s.dispersing.is_some(), "confirmations not delivered yet");
    s.request(Request::Discard { from: 0, below: 7 }, &mut out);
    assert!(s.dispersing.is_none());
    assert!(
        s.snapshots.is_empty() && s.held.is_empty(),
        "version 0 forgotten"
    );
    s.request(Request::Checkpoint { version: 7 }, &mut out);
    let refused = out
        .drain()
        .any(|a| matches!(a, Action::Report(StorageEvent::Rejected { .. })));
    assert!(!refused);
}

#[test]
fn a_holder_keeps_as_many_versions_as_configured() {
    let mut rng = SimRng::new(8);
    let mut net = Net::new(
        8,
        StorageConfig {
            keep_versions: 3,
            ..cfg(Scheme::Ida)
        },
    );
    for v in 1..=5 {
        net.checkpoint_all(v, &[4000], &mut rng);
    }
    let versions: BTreeSet<u64> = net.node(3).held.keys().map(|k| k.version).collect();
    assert_eq!(versions, [3, 4, 5].into());
    assert_eq!(net.node(3).snapshots.len(), 3);
}

#[test]
fn with_agreed_views_a_suspicion_does_not_move_a_placement() {
    // Two processes, one suspecting process 5 before a checkpoint: by default their
    // placements differ (the suspicious one draws over 7); with agreed views both draw over
    // the view given, process 5's pieces counted as lost.
    for agreed in [false, true] {
        let mut net = Net::new(
            8,
            StorageConfig {
                agreed_views: agreed,
                ..cfg(Scheme::Ida)
            },
        );
        let mut out = Outbox::new();
        net.node(1).on_suspect(Time::ZERO, NodeId(5), &mut out);
        for at in [1, 2] {
            net.node(at).request(
                Request::Protect {
                    vid: at,
                    data: Bytes::from(vec![1u8; 100]),
                },
                &mut out,
            );
            net.node(at)
                .request(Request::Checkpoint { version: 1 }, &mut out);
        }
        let (a, b) = (
            net.node(1).snapshots[&1].placement.view.clone(),
            net.node(2).snapshots[&1].placement.view.clone(),
        );
        assert_eq!(a == b, agreed, "agreed views {agreed}: {a:?} against {b:?}");
    }
}

#[test]
fn a_safe_state_outlives_its_corrupted_neighborhood_through_its_replicas() {
    let mut rng = SimRng::new(12);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    let states = net.safe_state_all(1, 1, &[2500], &mut rng);
    let placement = net.node(0).snapshots[&1].placement.clone();
    // The whole neighborhood of 5 dies: LOCALSTORAGE alone could not rebuild it.
    let mut victims = neighbors(&mut net, 5);
    victims.push(5);
    assert!(!placement.survives(5, 0, &as_ids(&victims)));
    net.kill(&victims);
    let at = (0..16).find(|x| !victims.contains(x)).unwrap();
    let e = net.recover(at, 5);
    assert_eq!(recovered(&e), Some(&states[5]), "{e:?}");
    // The replica's holders die too, but for one: fewer slots than m, an error.
    let (copy, m) = (placement.replica_holders(5, 1).unwrap(), 2);
    let more: Vec<u64> = copy.iter().map(|h| h.0).take(copy.len() - m + 1).collect();
    net.kill(&more);
    victims.extend(&more);
    assert!(!placement.survives(5, 1, &as_ids(&victims)));
    let at = (0..16).find(|x| !victims.contains(x)).unwrap();
    let e = net.recover(at, 5);
    assert!(
        matches!(e, StorageEvent::Unrecoverable { vid: 5, .. }),
        "{e:?}"
    );
}

fn as_ids(v: &[u64]) -> Vec<NodeId> {
    v.iter().copied().map(NodeId).collect()
}

#[test]
fn a_safe_state_is_kept_past_the_window_until_two_newer_came() {
    let mut rng = SimRng::new(13);
    let mut net = Net::new(8, cfg(Scheme::Ida));
    let safe = net.safe_state_all(1, 1, &[3000], &mut rng);
    for v in 2..=5 {
        net.checkpoint_all(v, &[3000], &mut rng);
    }
    let held: BTreeSet<u64> = net.node(3).held.keys().map(|k| k.version).collect();
    assert_eq!(
        held,
        [1, 4, 5].into(),
        "the window of two and the SafeState"
    );
    net.request(
        6,
        Request::Recover {
            vid: 2,
            version: Some(1),
        },
    );
    let e = net.take().remove(0).1;
    assert!(recovered(&e) == Some(&safe[2]), "the SafeState rebuilds");
    net.safe_state_all(6, 1, &[3000], &mut rng);
    net.safe_state_all(7, 1, &[3000], &mut rng);
    let held: BTreeSet<u64> = net.node(3).held.keys().map(|k| k.version).collect();
    assert_eq!(held, [6, 7].into(), "two newer SafeStates free the first");
}

#[test]
fn a_backtrack_doubles_the_neighborhoods_of_later_checkpoints_only() {
    let mut rng = SimRng::new(14);
    let mut net = Net::new(16, cfg(Scheme::Ida));
    net.checkpoint_all(1, &[100], &mut rng);
    for i in 0..16 {
        net.request(i, Request::Backtrack { backtracks: 1 });
    }
    let states = net.checkpoint_all(2, &[100], &mut rng);
    let sizes = |v: u64, net: &mut Net| net.node(0).snapshots[&v].placement.size;
    assert_eq!((sizes(1, &mut net), sizes(2, &mut net)), (4, 8));
    // m = 4 of 8: four of 5's neighborhood die, the state comes back.
    let victims: Vec<u64> = neighbors(&mut net, 5)
        .into_iter()
        .take(3)
        .chain([5])
        .collect();
    net.kill(&victims);
    let at = (0..16).find(|x| !victims.contains(x)).unwrap();
    assert_eq!(recovered(&net.recover(at, 5)), Some(&states[5]));
}

#[test]
fn a_job_that_releases_safe_states_itself_keeps_them_until_it_does() {
    let mut rng = SimRng::new(15);
    let cfg = StorageConfig {
        keep_safe: usize::MAX,
        ..cfg(Scheme::Ida)
    };
    let mut net = Net::new(8, cfg);
    for v in 1..=3 {
        net.safe_state_all(v, 1, &[2000], &mut rng);
    }
    net.checkpoint_all(4, &[2000], &mut rng);
    net.checkpoint_all(5, &[2000], &mut rng);
    let held =
        |net: &mut Net| -> BTreeSet<u64> { net.node(3).held.keys().map(|k| k.version).collect() };
    assert_eq!(held(&mut net), [1, 2, 3, 4, 5].into());
    for i in 0..8 {
        net.request(i, Request::Release { below: 3 });
    }
    assert_eq!(held(&mut net), [3, 4, 5].into());
}
