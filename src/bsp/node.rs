//! Robust-BSP on real processors: one [`BspNode`] per process runs the threads of the virtual
//! processors it owns, exchanges their messages, checkpoints their states with neighborhood
//! storage (IDA over the neighborhood, `crate::storage`) after every superstep, and when
//! processors fail agrees with the survivors on where to resume, adopts the dead's virtual
//! processors and rebuilds their states from the pieces their neighbors hold.
//!
//! A superstep `c` on a processor (Figure 3's PRIMARYJOB, CHECKPOINT, and the h-relation):
//! 1. checkpoint `c`: every owned virtual processor's state and inbox before `c` is
//!    dispersed (LOCALSTORAGE); the checkpoint is complete when every holder confirmed;
//! 2. run the superstep's threads ([`Program::step`]) and send every live processor one batch
//!    of the messages for the virtual processors it owns, an empty one when there are none;
//! 3. a batch from every live processor ends the superstep (the barrier); their messages,
//!    sorted by sender, are the inboxes of `c + 1`.
//!
//! A batch of `c` leaves only after its sender's checkpoint `c` is complete, so a processor
//! that got every batch of `c` knows checkpoint `c` complete everywhere: that is its `known`.
//! When a processor is suspected (a lost connection, `Protocol::on_suspect`), each survivor
//! sends every other its set of dead and its `known` ([`BspMsg::Known`]); a processor told of
//! a death it had not seen adopts it (fail-stop: the dead stay dead), and one told that it is
//! dead stops ([`BspEvent::Excluded`]). Once a survivor holds the same dead set from every
//! other, it resumes from the newest checkpoint any of them knows complete, in epoch
//! `|dead|`: each virtual processor is owned by its home processor (blocks of `V / n`) or,
//! while that is dead, by the next live processor of the ring; an adopted state is rebuilt
//! from storage (any `m` of its `n` pieces, checked), a kept one from the processor's own copy.
//! The rebuilt states are checkpointed again over the survivors before the superstep reruns,
//! so a neighborhood that lost members has them back at full strength.
//!
//! Why storage keeps three versions ([`StorageConfig::keep_versions`]): processors can be one
//! superstep apart when one fails, and the newest checkpoint the survivors know complete can
//! be one older than the newest complete (the batch that proved it reached only the dead), while
//! the dead may have started the next: three cover all of them. Versions taken after the one
//! resumed from are discarded, and pieces of an older epoch are refused, so nothing stale
//! takes a place in the window.
//!
//! SafeStates and BACKTRACK (sections 3.5.2–3.5.3): the checkpoint of every superstep that is
//! a multiple of [`BspConfig::safe_every`] (`K_0`, the paper's epoch; its "epoch" is not ours,
//! which counts agreements) is a SafeState: GLOBALSTORAGE gives each piece
//! `Λ = ⌈2αn / (N_u + 2)⌉` replicas in the next neighborhoods (Lemma 3.12), and storage keeps
//! it past its window. When an adopted state cannot be rebuilt from its neighborhood (more
//! than half of it died at once: a corruption), its processor raises the BACKTRACKs and sends
//! its `Known` again; the survivors agree on the raised count as on a death, double the
//! neighborhoods under a new hash, and resume from the newest SafeState any of them knows
//! complete, every state rebuilt from it (their own from their copy, adopted ones from the
//! replicas). Only a SafeState that cannot be rebuilt either (more than `α` of the job lost
//! across the replicas) stops the run, with [`BspEvent::Failed`].
//!
//! Departures from the paper: every survivor reruns the supersteps since the checkpoint it
//! resumes from (at most two per failure), where Figure 3 reruns only the dead's pending
//! threads in SECONDARYJOBs; the dead's virtual processors go to the ring's next live
//! processor, not by ALB; the corruption is found when a rebuild fails, not by a
//! BSPAGREEMENT exception code; and the owner sends a SafeState's replicas itself, where
//! Figure 9 has each neighborhood copy its pieces to the next. Never a wrong result: a state
//! that cannot be rebuilt exactly is an error.

use super::event::BspEvent;
use super::Program;
use crate::proto::bsp::{BspMsg, Known, Mail};
use crate::proto::storage::StoreMsg;
use crate::proto::{Action, Outbox, Protocol, Time, TimerId};
use crate::storage::StorageEvent;
use crate::storage::{Request, Storage, StorageConfig};
use crate::NodeId;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Settings every processor of a job shares.
#[derive(Clone, Debug)]
pub struct BspConfig {
    /// Virtual processors `V`.
    pub virt: u64,
    /// Supersteps of the program.
    pub supersteps: u32,
    /// `K_0`: every superstep that is a multiple of it starts with a SafeState.
    pub safe_every: u32,
    /// `α`: the fraction of the processors the job survives losing; sets the SafeStates'
    /// replicas `Λ`.
    pub alpha: f64,
    /// The storage under the checkpoints; [`BspNode::new`] sets three versions and agreed
    /// views.
    pub storage: StorageConfig,
}

/// Where a processor is in its superstep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for checkpoint `version` to be complete.
    Checkpointing { version: u64 },
    /// Batches sent; waiting for everyone's.
    Exchanging,
    /// A failure: waiting for every survivor's dead set and `known`.
    Agreeing,
    /// Rebuilding adopted states of checkpoint `version`.
    Rebuilding { version: u64 },
    /// The program is done.
    Finished,
    /// A state could not be rebuilt, or the others hold this processor dead.
    Stopped,
}

/// One real processor of a Robust-BSP job.
pub struct BspNode {
    me: NodeId,
    /// Every processor of the job, sorted: the ring of adoption.
    all: Vec<NodeId>,
    program: &'static dyn Program,
    cfg: BspConfig,
    storage: Storage,
    dead: BTreeSet<NodeId>,
    /// BACKTRACKs agreed or raised (the storage's neighborhoods are `2^backtracks · N_0`).
    backtracks: u32,
    /// The BACKTRACKs of the last resume: fewer than `backtracks` means one is pending.
    resumed_backtracks: u32,
    /// The epoch: agreements so far (`|dead| + backtracks`).
    epoch: u32,
    phase: Phase,
    step: u32,
    /// Owned virtual processors: state and inbox (sorted by sender) before `step`.
    vps: BTreeMap<u64, (u64, Vec<(u64, u64)>)>,
    /// The newest checkpoint known complete at every processor.
    known: Option<Known>,
    /// The newest SafeState known complete at every processor.
    safe: Option<Known>,
    /// This processor's own checkpointed states by version (the newest few).
    saved: BTreeMap<u64, BTreeMap<u64, Bytes>>,
    /// Its own states of the SafeStates from `safe` on.
    safe_saved: BTreeMap<u64, BTreeMap<u64, Bytes>>,
    /// The rebuild under way is from a SafeState: if it fails, nothing is left to go back to.
    from_safe: bool,
    /// Batches by (epoch, step), by sender.
    batches: HashMap<(u32, u32), BTreeMap<NodeId, Vec<Mail>>>,
    /// What each survivor sent last: its dead set, BACKTRACKs, `known` and `safe`.
    knowns: HashMap<NodeId, Told>,
    /// Adopted states still being rebuilt.
    rebuilding: BTreeSet<u64>,
    /// Storage events to act on (the nested protocol reports them while it runs).
    storage_events: VecDeque<StorageEvent>,
    version_counter: u64,
}

/// A survivor's [`BspMsg::Known`].
struct Told {
    dead: Vec<u64>,
    backtracks: u32,
    known: Option<Known>,
    safe: Option<Known>,
}

/// The storage version of the checkpoint of `step` in `epoch`: increasing with both.
pub fn version(epoch: u32, step: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(step)
}

impl BspNode {
    /// Processor `me` of the job `all`, running `program`.
    pub fn new(me: NodeId, all: &[NodeId], program: &'static dyn Program, cfg: BspConfig) -> Self {
        let mut all = all.to_vec();
        all.sort_unstable();
        all.dedup();
        let storage_cfg = StorageConfig {
            keep_versions: cfg.storage.keep_versions.max(3),
            keep_safe: usize::MAX,
            agreed_views: true,
            ..cfg.storage.clone()
        };
        Self {
            me,
            storage: Storage::new(me, &all, storage_cfg),
            all,
            program,
            cfg,
            dead: BTreeSet::new(),
            backtracks: 0,
            resumed_backtracks: 0,
            epoch: 0,
            phase: Phase::Checkpointing { version: 0 },
            step: 0,
            vps: BTreeMap::new(),
            known: None,
            safe: None,
            saved: BTreeMap::new(),
            safe_saved: BTreeMap::new(),
            from_safe: false,
            batches: HashMap::new(),
            knowns: HashMap::new(),
            rebuilding: BTreeSet::new(),
            storage_events: VecDeque::new(),
            version_counter: 0,
        }
    }

    /// The processors this one holds dead.
    pub fn dead(&self) -> &BTreeSet<NodeId> {
        &self.dead
    }

    /// The epoch (failures and BACKTRACKs agreed so far).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// BACKTRACKs so far.
    pub fn backtracks(&self) -> u32 {
        self.backtracks
    }

    /// Where this processor is and what it waits for, for a run that does not end.
    pub fn status(&self) -> String {
        let missing = |have: &dyn Fn(NodeId) -> bool| -> Vec<u64> {
            self.live()
                .filter(|&p| p != self.me && !have(p))
                .map(|p| p.0)
                .collect()
        };
        let what = match self.phase {
            Phase::Checkpointing { version } => format!("checkpoint {version:#x} dispersing"),
            Phase::Exchanging => {
                let got = self.batches.get(&(self.epoch, self.step));
                let m = missing(&|p| got.is_some_and(|b| b.contains_key(&p)));
                format!("superstep {} waits for batches of {m:?}", self.step)
            }
            Phase::Agreeing => {
                let dead: Vec<u64> = self.dead.iter().map(|p| p.0).collect();
                let m = missing(&|p| self.agrees(p, &dead));
                format!(
                    "agreeing on {dead:?} and {} backtracks, waits for {m:?}",
                    self.backtracks
                )
            }
            Phase::Rebuilding { version } => {
                format!("rebuilding {:?} of {version:#x}", self.rebuilding)
            }
            Phase::Finished => "finished".into(),
            Phase::Stopped => "stopped".into(),
        };
        format!("{:?} epoch {}: {what}", self.me, self.epoch)
    }

    /// The processor that owns virtual processor `vid` while `dead` are dead: its home
    /// (blocks of `V / n` in id order), or the next live processor after it on the ring.
    pub fn owner(all: &[NodeId], dead: &BTreeSet<NodeId>, virt: u64, vid: u64) -> Option<NodeId> {
        let n = all.len() as u64;
        if n == 0 || virt == 0 {
            return None;
        }
        let home = (u128::from(vid) * u128::from(n) / u128::from(virt)) as usize;
        (0..all.len())
            .map(|j| all[(home + j) % all.len()])
            .find(|p| !dead.contains(p))
    }

    fn live(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.all.iter().copied().filter(|p| !self.dead.contains(p))
    }

    fn owned(&self) -> Vec<u64> {
        (0..self.cfg.virt)
            .filter(|&v| Self::owner(&self.all, &self.dead, self.cfg.virt, v) == Some(self.me))
            .collect()
    }

    // ---- the nested storage ------------------------------------------------------------

    /// Run `f` on the storage protocol; its messages go out wrapped, its events are queued
    /// for [`BspNode::storage_news`].
    fn store(
        &mut self,
        out: &mut Outbox<BspMsg, BspEvent>,
        f: impl FnOnce(&mut Storage, &mut Outbox<StoreMsg, StorageEvent>),
    ) {
        let mut o = Outbox::new();
        f(&mut self.storage, &mut o);
        for a in o.drain() {
            match a {
                Action::Send { to, msg } => out.send(to, msg),
                Action::Report(e) => self.storage_events.push_back(e),
                Action::SetTimer { timer, after } => out.set_timer(timer, after),
                Action::CancelTimer(t) => out.cancel_timer(t),
            }
        }
    }

    fn storage_news(&mut self, out: &mut Outbox<BspMsg, BspEvent>) {
        while let Some(e) = self.storage_events.pop_front() {
            match e {
                StorageEvent::Checkpointed { version, .. } => {
                    if self.phase == (Phase::Checkpointing { version }) {
                        self.run_superstep(out);
                    }
                }
                StorageEvent::Recovered { vid, version, data } => {
                    if self.phase == (Phase::Rebuilding { version }) && self.rebuilding.remove(&vid)
                    {
                        match decode(&data) {
                            Some(vp) => {
                                self.vps.insert(vid, vp);
                            }
                            None => {
                                return self.stop(out, format!("state {vid} decodes to nothing"))
                            }
                        }
                        if self.rebuilding.is_empty() {
                            // Every owned state is back: checkpoint over the survivors, rerun.
                            self.checkpoint(out);
                        }
                    }
                }
                StorageEvent::Unrecoverable { vid, version, why } => {
                    if self.phase != (Phase::Rebuilding { version }) {
                        continue;
                    }
                    if self.from_safe {
                        return self.stop(
                            out,
                            format!("state of virtual processor {vid} is lost, its SafeState too: {why}"),
                        );
                    }
                    // A corrupted neighborhood: BACKTRACK to the last SafeState.
                    self.learn(&[], self.backtracks + 1, out);
                }
                StorageEvent::Rejected { why } => {
                    if matches!(
                        self.phase,
                        Phase::Checkpointing { .. } | Phase::Rebuilding { .. }
                    ) {
                        return self.stop(out, format!("storage refused: {why}"));
                    }
                }
                StorageEvent::Dropped { .. } => {}
            }
        }
    }

    fn stop(&mut self, out: &mut Outbox<BspMsg, BspEvent>, why: String) {
        self.phase = Phase::Stopped;
        self.storage_events.clear();
        out.report(BspEvent::Failed { why });
    }

    // ---- supersteps --------------------------------------------------------------------

    /// Step 1: checkpoint the owned states and inboxes before `self.step`.
    fn checkpoint(&mut self, out: &mut Outbox<BspMsg, BspEvent>) {
        let v = version(self.epoch, self.step);
        let states: BTreeMap<u64, Bytes> = self
            .vps
            .iter()
            .map(|(&vid, (s, inbox))| (vid, encode(*s, inbox)))
            .collect();
        self.saved.insert(v, states.clone());
        while self.saved.len() > 4 {
            self.saved.pop_first();
        }
        let replicas = self.is_safe(self.step).then(|| self.lambda());
        if replicas.is_some() {
            self.safe_saved.insert(v, states.clone());
        }
        self.phase = Phase::Checkpointing { version: v };
        self.store(out, |s, o| {
            for (vid, data) in states {
                s.request(Request::Protect { vid, data }, o);
            }
            match replicas {
                Some(replicas) => s.request(
                    Request::GlobalStorage {
                        version: v,
                        replicas,
                    },
                    o,
                ),
                None => s.request(Request::Checkpoint { version: v }, o),
            }
        });
    }

    /// `safe` is the newest SafeState complete everywhere: older ones are not needed, here
    /// or in storage. (Storage keeps SafeStates until told: failures in a row can start
    /// several before one completes, and the one to go back to is the newest complete.)
    fn release(&mut self, safe: Option<Known>, out: &mut Outbox<BspMsg, BspEvent>) {
        self.safe = self.safe.max(safe);
        if let Some(k) = self.safe {
            self.safe_saved.retain(|&v, _| v >= k.version);
            self.store(out, |s, o| {
                s.request(Request::Release { below: k.version }, o)
            });
        }
    }

    /// Whether the checkpoint before superstep `step` is a SafeState.
    fn is_safe(&self, step: u32) -> bool {
        step.is_multiple_of(self.cfg.safe_every.max(1))
    }

    /// `Λ = ⌈2αn / (N_u + 2)⌉` (Lemma 3.12), for `n` processors of the job and the
    /// neighborhoods of the live ones (storage caps it at one per other neighborhood).
    fn lambda(&self) -> usize {
        let live = self.live().count();
        let n_u = crate::storage::placement::size_for(live, self.backtracks);
        let alpha = self.cfg.alpha.clamp(0.0, 1.0);
        (2.0 * alpha * self.all.len() as f64 / (n_u + 2) as f64).ceil() as usize
    }

    /// Step 2: the threads of the owned virtual processors, and one batch to each live one.
    fn run_superstep(&mut self, out: &mut Outbox<BspMsg, BspEvent>) {
        let (k, v) = (self.step, self.cfg.virt);
        out.report(BspEvent::Superstep {
            epoch: self.epoch,
            step: k,
        });
        let mut mail: BTreeMap<NodeId, Vec<Mail>> = self.live().map(|p| (p, Vec::new())).collect();
        for (&vid, vp) in self.vps.iter_mut() {
            let (state, sent) = self.program.step(vid, k, v, vp.0, &vp.1);
            *vp = (state, Vec::new());
            for (to, value) in sent {
                let Some(p) = Self::owner(&self.all, &self.dead, v, to) else {
                    continue;
                };
                if let Some(m) = mail.get_mut(&p) {
                    m.push(Mail {
                        to,
                        from: vid,
                        value,
                    });
                }
            }
        }
        self.phase = Phase::Exchanging;
        let epoch = self.epoch;
        for (p, m) in mail {
            if p == self.me {
                self.batches.entry((epoch, k)).or_default().insert(p, m);
            } else {
                out.send(
                    p,
                    BspMsg::Batch {
                        epoch,
                        step: k,
                        mail: m,
                    },
                );
            }
        }
        self.barrier(out);
    }

    /// Step 3: with a batch from every live processor the superstep is over.
    fn barrier(&mut self, out: &mut Outbox<BspMsg, BspEvent>) {
        if self.phase != Phase::Exchanging {
            return;
        }
        let key = (self.epoch, self.step);
        let complete = self
            .batches
            .get(&key)
            .is_some_and(|b| self.live().all(|p| b.contains_key(&p)));
        if !complete {
            return;
        }
        let batches = self.batches.remove(&key).unwrap_or_default();
        // Every batch of this superstep proves its checkpoint, taken in this epoch, complete.
        self.known = Some(Known {
            step: self.step,
            version: version(self.epoch, self.step),
        });
        if self.is_safe(self.step) {
            self.release(self.known, out);
        }
        for m in batches.into_values().flatten() {
            if let Some(vp) = self.vps.get_mut(&m.to) {
                vp.1.push((m.from, m.value));
            }
        }
        for vp in self.vps.values_mut() {
            vp.1.sort_unstable();
        }
        self.step += 1;
        if self.step >= self.cfg.supersteps {
            self.phase = Phase::Finished;
            let states = self.vps.iter().map(|(&vid, vp)| (vid, vp.0)).collect();
            out.report(BspEvent::Finished {
                epoch: self.epoch,
                states,
            });
            return;
        }
        self.checkpoint(out);
    }

    // ---- failures ----------------------------------------------------------------------

    /// `gone` are dead and the BACKTRACKs are at least `backtracks`: if that is news, tell
    /// every survivor what this processor holds dead, the BACKTRACKs and what it knows.
    fn learn(&mut self, gone: &[NodeId], backtracks: u32, out: &mut Outbox<BspMsg, BspEvent>) {
        let fresh: Vec<NodeId> = gone
            .iter()
            .copied()
            .filter(|p| self.all.binary_search(p).is_ok() && !self.dead.contains(p))
            .collect();
        if (fresh.is_empty() && backtracks <= self.backtracks) || self.phase == Phase::Stopped {
            return;
        }
        if fresh.contains(&self.me) {
            self.phase = Phase::Stopped;
            out.report(BspEvent::Excluded);
            return;
        }
        for &p in &fresh {
            self.dead.insert(p);
            // Storage stops waiting for its confirmations and pieces.
            self.store(out, |s, o| s.on_suspect(Time::ZERO, p, o));
        }
        self.backtracks = self.backtracks.max(backtracks);
        self.epoch = self.dead.len() as u32 + self.backtracks;
        self.batches.retain(|&(e, _), _| e >= self.epoch);
        self.phase = Phase::Agreeing;
        let dead: Vec<u64> = self.dead.iter().map(|p| p.0).collect();
        let others: Vec<NodeId> = self.live().filter(|&p| p != self.me).collect();
        for p in others {
            out.send(
                p,
                BspMsg::Known {
                    dead: dead.clone(),
                    known: self.known,
                    safe: self.safe,
                    backtracks: self.backtracks,
                },
            );
        }
        self.agree(out);
    }

    /// Whether survivor `p` last told this processor's dead set and BACKTRACKs.
    fn agrees(&self, p: NodeId, dead: &[u64]) -> bool {
        self.knowns
            .get(&p)
            .is_some_and(|t| t.dead == dead && t.backtracks == self.backtracks)
    }

    /// Every survivor holds this dead set and these BACKTRACKs: resume from the newest
    /// checkpoint any knows, or from the newest SafeState after a BACKTRACK.
    fn agree(&mut self, out: &mut Outbox<BspMsg, BspEvent>) {
        if self.phase != Phase::Agreeing {
            return;
        }
        let dead: Vec<u64> = self.dead.iter().map(|p| p.0).collect();
        let (mut known, mut safe) = (self.known, self.safe);
        for p in self.live().filter(|&p| p != self.me) {
            if !self.agrees(p, &dead) {
                return;
            }
            let t = &self.knowns[&p];
            known = known.max(t.known);
            safe = safe.max(t.safe);
        }
        let backtrack = self.backtracks > self.resumed_backtracks;
        self.resumed_backtracks = self.backtracks;
        self.release(safe, out);
        if backtrack {
            let backtracks = self.backtracks;
            self.store(out, |s, o| s.request(Request::Backtrack { backtracks }, o));
            self.rollback(safe, true, out);
        } else {
            self.rollback(known, false, out);
        }
    }

    fn rollback(&mut self, to: Option<Known>, from_safe: bool, out: &mut Outbox<BspMsg, BspEvent>) {
        let live: Vec<NodeId> = self.live().collect();
        let (from, below) = (to.map_or(0, |k| k.version + 1), version(self.epoch, 0));
        self.store(out, |s, o| {
            s.request(Request::View(live), o);
            s.request(Request::Discard { from, below }, o);
        });
        self.known = to;
        self.from_safe = from_safe;
        self.vps.clear();
        self.rebuilding.clear();
        let owned = self.owned();
        let mut adopted = Vec::new();
        match to {
            None => {
                self.step = 0;
                for vid in owned {
                    let s = self.program.init(vid, self.cfg.virt);
                    self.vps.insert(vid, (s, Vec::new()));
                }
            }
            Some(k) => {
                self.step = k.step;
                let mine = if from_safe {
                    self.safe_saved.get(&k.version)
                } else {
                    self.saved.get(&k.version)
                };
                for vid in owned {
                    match mine.and_then(|m| m.get(&vid)).and_then(|b| decode(b)) {
                        Some(vp) => {
                            self.vps.insert(vid, vp);
                        }
                        None => adopted.push(vid),
                    }
                }
            }
        }
        out.report(BspEvent::Rollback {
            epoch: self.epoch,
            dead: self.dead.iter().copied().collect(),
            to: to.map(|k| k.step),
            adopted: adopted.len(),
            backtracks: self.backtracks,
        });
        let Some(k) = to.filter(|_| !adopted.is_empty()) else {
            // Nothing to rebuild: checkpoint over the survivors and rerun the superstep.
            return self.checkpoint(out);
        };
        self.phase = Phase::Rebuilding { version: k.version };
        self.rebuilding = adopted.iter().copied().collect();
        self.store(out, |s, o| {
            for vid in adopted {
                s.request(
                    Request::Recover {
                        vid,
                        version: Some(k.version),
                    },
                    o,
                );
            }
        });
    }

    fn handle(&mut self, from: NodeId, msg: BspMsg, out: &mut Outbox<BspMsg, BspEvent>) {
        if self.phase == Phase::Stopped || self.dead.contains(&from) {
            return;
        }
        match msg {
            BspMsg::Store(StoreMsg::Put { key, .. })
                if (key.version >> 32) < u64::from(self.epoch) =>
            {
                // A piece of an older epoch's checkpoint: it would hold a place in the window.
                out.send(from, StoreMsg::Refused { key });
            }
            BspMsg::Store(m) => self.store(out, |s, o| s.on_message(Time::ZERO, from, m, o)),
            BspMsg::Batch { epoch, step, mail } => {
                if epoch >= self.epoch && self.all.binary_search(&from).is_ok() {
                    self.batches
                        .entry((epoch, step))
                        .or_default()
                        .insert(from, mail);
                    self.barrier(out);
                }
            }
            BspMsg::Known {
                dead,
                known,
                safe,
                backtracks,
            } => {
                let theirs: Vec<NodeId> = dead.iter().map(|&d| NodeId(d)).collect();
                let told = Told {
                    dead,
                    backtracks,
                    known,
                    safe,
                };
                self.knowns.insert(from, told);
                self.learn(&theirs, backtracks, out);
                self.agree(out);
            }
        }
    }
}

/// The job's result from the survivors' [`BspEvent::Finished`] states: every virtual
/// processor's final state, each reported by exactly one processor.
pub fn gather(
    virt: u64,
    reports: impl IntoIterator<Item = Vec<(u64, u64)>>,
) -> Result<Vec<u64>, String> {
    let mut states = vec![None; virt as usize];
    for (vid, s) in reports.into_iter().flatten() {
        let slot = states
            .get_mut(vid as usize)
            .ok_or(format!("virtual processor {vid} is outside the job"))?;
        if slot.replace(s).is_some() {
            return Err(format!("virtual processor {vid} reported twice"));
        }
    }
    states
        .into_iter()
        .enumerate()
        .map(|(v, s)| s.ok_or(format!("virtual processor {v} reported by nobody")))
        .collect()
}

/// A virtual processor's checkpoint: its state, then its inbox as (sender, value) pairs.
fn encode(state: u64, inbox: &[(u64, u64)]) -> Bytes {
    let mut b = Vec::with_capacity(8 + 16 * inbox.len());
    b.extend_from_slice(&state.to_le_bytes());
    for (from, value) in inbox {
        b.extend_from_slice(&from.to_le_bytes());
        b.extend_from_slice(&value.to_le_bytes());
    }
    Bytes::from(b)
}

fn decode(b: &[u8]) -> Option<(u64, Vec<(u64, u64)>)> {
    if b.len() < 8 || !(b.len() - 8).is_multiple_of(16) {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let inbox = (8..b.len())
        .step_by(16)
        .map(|i| (word(i), word(i + 8)))
        .collect();
    Some((word(0), inbox))
}

impl Protocol for BspNode {
    type Msg = BspMsg;
    type Event = BspEvent;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<BspMsg, BspEvent>) {
        for vid in self.owned() {
            let s = self.program.init(vid, self.cfg.virt);
            self.vps.insert(vid, (s, Vec::new()));
        }
        self.checkpoint(out);
        self.storage_news(out);
        self.version_counter += 1;
    }

    fn on_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: BspMsg,
        out: &mut Outbox<BspMsg, BspEvent>,
    ) {
        self.handle(from, msg, out);
        self.storage_news(out);
        self.version_counter += 1;
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<BspMsg, BspEvent>) {
        self.store(out, |s, o| s.on_timer(now, timer, o));
        self.storage_news(out);
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<BspMsg, BspEvent>) {
        if self.dead.contains(&peer) || self.all.binary_search(&peer).is_err() {
            // Storage still hears it: a piece asked of the peer again must be asked elsewhere.
            self.store(out, |s, o| s.on_suspect(now, peer, o));
        } else {
            self.learn(&[peer], self.backtracks, out);
        }
        self.storage_news(out);
        self.version_counter += 1;
    }

    fn state_version(&self) -> u64 {
        self.version_counter
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
