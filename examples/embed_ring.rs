//! A token ring over the ranks of a job that keeps going when a rank is killed: the smallest
//! program a runtime author needs to see weft's endpoint in use.
//!
//! In this process (`cargo run --release --example embed_ring -- 6`) it starts 6 ranks, one
//! thread each; under a launcher (`mpirun -np 6 target/release/examples/embed_ring`, `srun`)
//! each process is one rank. The token goes round `WEFT_RING_LAPS` times (default 10), each
//! holder keeping it `WEFT_RING_HOLD_MS` (default 2). `WEFT_RING_DIE=r:c` kills rank `r`
//! (SIGKILL, under a launcher; in this process, its endpoint stops) as it receives the token's
//! count `c`: the token dies with it, and the rank that handed it over hands it again to the
//! next live rank once the view without the dead is installed.
//!
//! After the last lap the token makes a closing lap: each rank hands it on at once and exits
//! once that hand-over has ended (`Delivered`: its successor has it). Every survivor prints
//! `rank R: done at C; view [..]; left [..]` and exits 0, with a view that excludes the killed
//! rank; `left` names the killed rank first, then any rank of the closing lap seen exiting.
//!
//! The rules that make it survive, with only what the endpoint reports:
//! - every hand-over ends in `Delivered` or `Failed`; a failed one goes to the next live rank;
//! - a hand-over to a rank that then `Left` the view is made again, to the rank after it,
//!   with the same count;
//! - a rank takes a token only with a count above every one it took before, so a token the
//!   dead had passed on before it died, and its second copy, are one token.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use weft::prelude::*;

/// How long a rank waits for anything before it calls the ring stuck.
const STUCK: Duration = Duration::from_secs(30);

/// What the ring is asked to do.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    /// Laps of the token: it ends at count `laps × size`.
    pub laps: u64,
    /// How long each holder keeps the token.
    pub hold: Duration,
    /// The rank that dies, and at which count.
    pub die: Option<(u32, u64)>,
}

impl Ring {
    /// From `WEFT_RING_LAPS`, `WEFT_RING_HOLD_MS` and `WEFT_RING_DIE`.
    pub fn from_env() -> Result<Self, String> {
        let num = |name: &str, default: u64| -> Result<u64, String> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{name}={v:?}: not a number")),
                Err(_) => Ok(default),
            }
        };
        let die = match std::env::var("WEFT_RING_DIE") {
            Ok(v) => {
                let bad = || format!("WEFT_RING_DIE={v:?}: want RANK:COUNT");
                let (r, c) = v.split_once(':').ok_or_else(bad)?;
                Some((r.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?))
            }
            Err(_) => None,
        };
        Ok(Self {
            laps: num("WEFT_RING_LAPS", 10)?,
            hold: Duration::from_millis(num("WEFT_RING_HOLD_MS", 2)?),
            die,
        })
    }
}

/// How one rank's ring ended.
#[derive(Debug)]
pub enum Outcome {
    /// The closing lap passed: the last count this rank took, the view installed last, who
    /// left.
    Done {
        count: u64,
        view: Vec<Rank>,
        left: Vec<Rank>,
    },
    /// This rank was the one to die.
    Died,
}

/// The next live rank after `after` on the ring, other than `me`; `None` when `me` is alone.
fn next_live(live: &BTreeSet<Rank>, after: Rank, me: Rank) -> Option<Rank> {
    let past = live.range(Rank(after.0 + 1)..).find(|&&r| r != me);
    past.or_else(|| live.iter().find(|&&r| r != me)).copied()
}

/// Hand the token of `count` to the next live rank after `after`: (tag, to, count).
fn hand(
    ep: &Endpoint,
    live: &BTreeSet<Rank>,
    after: Rank,
    count: u64,
) -> Result<(u64, Rank, u64), String> {
    let to = next_live(live, after, ep.rank()).ok_or("the last rank standing")?;
    Ok((ep.send(to, count.to_le_bytes().to_vec()), to, count))
}

/// Run the ring at this endpoint until the last lap is announced.
pub fn run(ep: &Endpoint, ring: Ring) -> Result<Outcome, String> {
    let (me, size) = (ep.rank(), ep.size());
    let end = ring.laps * u64::from(size);
    // The ranks to hand the token to: the view, less those a hand-over failed to since.
    let mut live: BTreeSet<Rank> = (0..size).map(Rank).collect();
    let mut view: Vec<Rank> = live.iter().copied().collect();
    let mut left = Vec::new();
    // The highest count this rank took, and its last hand-over: (tag, to, count).
    let mut took = 0;
    let mut handed: Option<(u64, Rank, u64)> = None;
    // A token this rank holds: when to pass it on, and its count. Rank 0 starts with one.
    let mut holding: Option<(Instant, u64)> = None;
    if me.0 == 0 {
        took = 1;
        holding = Some((Instant::now() + ring.hold, 1));
    }
    // Set once this rank has handed on the closing token: it exits when that hand-over ends.
    let mut closing = false;
    let done = |view: Vec<Rank>, left: Vec<Rank>, count| Outcome::Done { count, view, left };
    loop {
        if let Some((_, count)) = holding.filter(|&(at, _)| at <= Instant::now()) {
            holding = None;
            handed = Some(hand(ep, &live, me, count + 1)?);
        }
        let wait = holding.map_or(STUCK, |(at, _)| {
            at.saturating_duration_since(Instant::now())
        });
        let event = match ep.next(wait) {
            Ok(NodeEvent::Protocol(e)) => e,
            Ok(_) => continue, // the transport's news: the endpoint reports what matters
            Err(Silence::Timeout(_)) if holding.is_some() => continue,
            Err(Silence::Timeout(_)) => {
                return Err(format!("rank {}: nothing for {STUCK:?}", me.0))
            }
            Err(Silence::Gone) => return Err(format!("rank {}: the endpoint stopped", me.0)),
        };
        // Whether the event ends this rank's last hand-over.
        let ends_hand_over = |tag: Option<u64>, to: Option<Rank>| {
            handed.is_some_and(|(t, r, _)| tag == Some(t) || to == Some(r))
        };
        match event {
            EndpointEvent::Received { data, .. } => {
                let count = u64::from_le_bytes(data[..].try_into().map_err(|_| "a bad token")?);
                if count <= took {
                    continue; // a copy of a token this rank already took
                }
                took = count;
                if ring.die == Some((me.0, count)) {
                    return Ok(Outcome::Died);
                }
                if closing {
                    return Ok(done(view, left, took)); // the closing lap came round
                }
                if count >= end {
                    handed = Some(hand(ep, &live, me, count + 1)?);
                    closing = true;
                } else {
                    holding = Some((Instant::now() + ring.hold, count));
                }
            }
            EndpointEvent::Delivered { tag, .. } if closing && ends_hand_over(Some(tag), None) => {
                return Ok(done(view, left, took));
            }
            EndpointEvent::Failed { tag, to, .. } if ends_hand_over(Some(tag), None) => {
                if closing {
                    return Ok(done(view, left, took));
                }
                live.remove(&to);
                let count = handed.map_or(took, |h| h.2);
                handed = Some(hand(ep, &live, to, count)?);
            }
            EndpointEvent::Left { who } => {
                live.remove(&who);
                left.push(who);
                if ends_hand_over(None, Some(who)) {
                    if closing {
                        return Ok(done(view, left, took));
                    }
                    let count = handed.map_or(took, |h| h.2);
                    handed = Some(hand(ep, &live, who, count)?);
                }
            }
            EndpointEvent::ViewInstalled { members, .. } => {
                live = members.iter().copied().collect();
                view = members.to_vec();
            }
            EndpointEvent::Suspected { who, why, .. } => {
                eprintln!("rank {}: suspects rank {} ({why:?})", me.0, who.0);
            }
            _ => {}
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ring = Ring::from_env()?;
    let launched = [
        "OMPI_COMM_WORLD_RANK",
        "PMI_FD",
        "SLURM_PROCID",
        "WEFT_RANK",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    let outcomes = if launched {
        let ep = Endpoint::from_launcher(&EndpointConfig::default())?;
        match run(&ep, ring)? {
            Outcome::Died => {
                // Killed as a crash would kill it: no goodbye, sockets closed by the kernel.
                // SAFETY: a signal to this process.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                unreachable!("SIGKILL");
            }
            done => vec![(ep.rank(), done)],
        }
    } else {
        let n: usize = std::env::args().nth(1).map_or(Ok(6), |a| a.parse())?;
        let job = Endpoint::on_loopback(n, &EndpointConfig::default())?;
        let runs: Vec<_> = job
            .into_iter()
            .map(|ep| {
                std::thread::spawn(move || {
                    let outcome = run(&ep, ring);
                    // The rank that dies stops here: its peers see its connections drop.
                    (ep.rank(), outcome, ep.stop())
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for r in runs {
            let (rank, outcome, _) = r.join().map_err(|_| "a rank panicked")?;
            outcomes.push((rank, outcome?));
        }
        outcomes
    };
    for (rank, o) in &outcomes {
        if let Outcome::Done { count, view, left } = o {
            let view: Vec<u32> = view.iter().map(|r| r.0).collect();
            let left: Vec<u32> = left.iter().map(|r| r.0).collect();
            println!(
                "rank {}: done at {count}; view {view:?}; left {left:?}",
                rank.0
            );
            if let Some((dead, _)) = ring.die {
                if view.contains(&dead) {
                    return Err(
                        format!("rank {}: rank {dead} died but is in the view", rank.0).into(),
                    );
                }
            }
        }
    }
    Ok(())
}
