//! The storage protocol of one process: owner (disperses its states at a checkpoint), holder
//! (keeps other processes' pieces, within a quota) and recoverer (INFORMATIONGATHERING: asks
//! holders for pieces, skips damaged or missing ones, rebuilds and checks).
//!
//! Sans-IO: the application's requests come in through [`Protocol::on_request`] (or
//! [`Storage::request`], for a protocol that nests this one), answers go out as
//! [`StorageEvent`]s, this protocol's own event type.

use super::crc::Shift;
use super::placement::Placement;
use super::StorageEvent;
use super::{xor, Scheme};
use crate::buf::Payload;
use crate::ida::{Dispersal, Mode};
use crate::proto::storage::{PieceKey, PieceMeta, StoreMsg};
use crate::proto::{Outbox, Protocol, Time, TimerId};
use crate::NodeId;
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What the application asks of its node's storage.
#[derive(Clone, Debug)]
pub enum Request {
    /// Keep `data` under virtual id `vid` from the next checkpoint on (replaces an earlier one).
    Protect {
        /// The virtual id.
        vid: u64,
        /// The state.
        data: Bytes,
    },
    /// Disperse every protected state as checkpoint `version`.
    Checkpoint {
        /// The checkpoint's number, increasing.
        version: u64,
    },
    /// Rebuild `vid`'s state of checkpoint `version` (the latest this process took, if `None`).
    Recover {
        /// The virtual id.
        vid: u64,
        /// The checkpoint.
        version: Option<u64>,
    },
    /// Disperse every protected state as checkpoint `version`, a SafeState (GLOBALSTORAGE,
    /// Figure 9): each piece also goes to the same slot of the `replicas` neighborhoods after
    /// its own (at most one per other neighborhood), and every holder keeps the version past
    /// the window of [`StorageConfig::keep_versions`] until two newer SafeStates came.
    GlobalStorage {
        /// The checkpoint's number, increasing.
        version: u64,
        /// `Λ`: copies beside the neighborhood's own.
        replicas: usize,
    },
    /// SafeStates older than `below` are no longer needed (a newer one is complete
    /// everywhere): they leave the pin, and the window.
    Release {
        /// The oldest SafeState still kept.
        below: u64,
    },
    /// The job BACKTRACKed (section 3.5.2): checkpoints from now on are placed over
    /// neighborhoods of `2^backtracks · N_0`, drawn by a new hash; earlier ones keep theirs.
    Backtrack {
        /// BACKTRACKs so far.
        backtracks: u32,
    },
    /// The live view changed (from the membership service).
    View(Vec<NodeId>),
    /// Forget every checkpoint numbered from `from` to below `below`, a dispersal among them
    /// included: a job that rolled back to the checkpoint before `from` drops what it took
    /// after it, so that those versions hold no place in the window of
    /// [`StorageConfig::keep_versions`].
    Discard {
        /// The first number forgotten.
        from: u64,
        /// The first number of the checkpoints taken from now on.
        below: u64,
    },
}

/// Settings shared by every process of a job.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// The coding.
    pub scheme: Scheme,
    /// Bytes per stripe: the unit of coding, of a message and of a rebuild's memory.
    pub stripe: usize,
    /// Bytes of other processes' pieces a holder keeps at most.
    pub quota: u64,
    /// The agreed seed of the neighborhood hash.
    pub seed: u64,
    /// BACKTRACKs so far: neighborhoods are `2^u · N_0`.
    pub backtracks: u32,
    /// Checkpoint versions a process keeps (its own snapshots and others' pieces), the newest
    /// ones: 2 by default (the checkpoint being taken and the last complete one); a job whose
    /// processes may be a checkpoint apart when one fails needs 3 (`crate::bsp::node`).
    pub keep_versions: usize,
    /// SafeStates ([`Request::GlobalStorage`]) kept past that window, the newest ones: 2 by
    /// default (the one being taken and the last complete one). A job that knows when a
    /// SafeState is complete everywhere keeps them all and says which to drop
    /// ([`Request::Release`]): failures in a row can start several before one completes.
    pub keep_safe: usize,
    /// Draw neighborhoods over the view the application gave ([`Request::View`]) only, a
    /// suspected holder's pieces counted as lost. Without it a checkpoint is placed over the
    /// view less this process's own suspicions, which is right for one owner but lets two
    /// processes that suspect at different moments place one version differently; a job that
    /// agrees on its views before it checkpoints (Robust-BSP's epochs) sets it, so that any
    /// process recovers any state from its own snapshot of the placement.
    pub agreed_views: bool,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            scheme: Scheme::Ida,
            stripe: 1 << 20,
            quota: 4 << 30,
            seed: 0,
            backtracks: 0,
            keep_versions: 2,
            keep_safe: 2,
            agreed_views: false,
        }
    }
}

/// A checkpoint as this process took it: where pieces went and its own states then.
struct Snapshot {
    placement: Placement,
    /// SafeState replicas (0: LOCALSTORAGE only).
    replicas: usize,
    states: BTreeMap<u64, Bytes>,
}

/// The checkpoint being dispersed.
struct Dispersing {
    version: u64,
    /// Pieces each holder has yet to confirm.
    waiting: HashMap<NodeId, u64>,
    left: u64,
    pieces: u64,
    lost: u64,
}

/// One stripe being gathered.
#[derive(Default)]
struct Gather {
    /// Holders in the order to ask them, with their slot (a slot may have one per replica).
    candidates: Vec<(NodeId, u8)>,
    /// Candidates asked already (IDA and partner), by index.
    tried: Vec<bool>,
    /// XOR: whether the fold went out.
    next: usize,
    asked: HashMap<u8, NodeId>,
    got: Vec<(u8, Payload)>,
    meta: Option<PieceMeta>,
    done: bool,
}

/// A state being rebuilt.
struct Recovery {
    placement: Placement,
    m: usize,
    state_len: Option<u64>,
    out: BytesMut,
    stripes: Vec<Gather>,
    left: usize,
}

/// Neighborhood storage on one process.
pub struct Storage {
    me: NodeId,
    view: Vec<NodeId>,
    cfg: StorageConfig,
    protected: BTreeMap<u64, Bytes>,
    snapshots: BTreeMap<u64, Snapshot>,
    dispersing: Option<Dispersing>,
    recoveries: HashMap<(u64, u64), Recovery>,
    held: HashMap<PieceKey, (PieceMeta, Payload)>,
    held_bytes: u64,
    /// XOR parities by (version, stripe), and the metadata of the segments folded into them.
    parity: HashMap<(u64, u32), Vec<u8>>,
    xor_meta: HashMap<PieceKey, PieceMeta>,
    versions: BTreeSet<u64>,
    /// SafeState versions, kept past the window: the two newest (the one being taken and the
    /// last complete one).
    pinned: BTreeSet<u64>,
    suspected: HashSet<NodeId>,
    /// XOR folds this process passed on, by next hop, with whom to tell if that hop fails.
    relayed: HashMap<NodeId, Vec<(PieceKey, u64)>>,
    reported_drops: HashSet<NodeId>,
    codecs: HashMap<(usize, usize), Arc<Dispersal>>,
    /// CRC shift operators by piece length.
    shifts: HashMap<usize, Shift>,
    /// The parity this process sent at its last checkpoint, and the buffers of it that the
    /// engine has let go of: the next checkpoint encodes into them instead of fresh pages.
    sent_parity: Vec<Bytes>,
    spare: Vec<Vec<u8>>,
    version_counter: u64,
}

impl Storage {
    /// Storage for process `me` of `view`.
    pub fn new(me: NodeId, view: &[NodeId], cfg: StorageConfig) -> Self {
        let mut view = view.to_vec();
        view.sort_unstable();
        view.dedup();
        Self {
            me,
            view,
            cfg,
            protected: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            dispersing: None,
            recoveries: HashMap::new(),
            held: HashMap::new(),
            held_bytes: 0,
            parity: HashMap::new(),
            xor_meta: HashMap::new(),
            versions: BTreeSet::new(),
            pinned: BTreeSet::new(),
            suspected: HashSet::new(),
            relayed: HashMap::new(),
            reported_drops: HashSet::new(),
            codecs: HashMap::new(),
            shifts: HashMap::new(),
            sent_parity: Vec::new(),
            spare: Vec::new(),
            version_counter: 0,
        }
    }

    /// Bytes of pieces and parities held (this process's own pieces included).
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Carry out one request.
    pub fn request(&mut self, req: Request, out: &mut Outbox<StoreMsg, StorageEvent>) {
        match req {
            Request::Protect { vid, data } => {
                self.protected.insert(vid, data);
            }
            Request::Checkpoint { version } => self.checkpoint(version, None, out),
            Request::GlobalStorage { version, replicas } => {
                self.checkpoint(version, Some(replicas), out)
            }
            Request::Backtrack { backtracks } => self.cfg.backtracks = backtracks,
            Request::Release { below } => {
                let before = self.pinned.len();
                self.pinned.retain(|&v| v >= below);
                if self.pinned.len() < before {
                    self.trim();
                }
            }
            Request::Recover { vid, version } => {
                match version.or_else(|| self.snapshots.keys().next_back().copied()) {
                    Some(v) => self.recover(vid, v, out),
                    None => reject(out, "no checkpoint taken yet".into()),
                }
            }
            Request::View(view) => {
                self.view = view;
                self.view.sort_unstable();
                self.view.dedup();
            }
            Request::Discard { from, below } => self.discard(from..below),
        }
        self.version_counter += 1;
    }

    /// The systematic `(n, m)` coding, made once.
    fn codec(&mut self, n: usize, m: usize) -> Option<Arc<Dispersal>> {
        if let Some(c) = self.codecs.get(&(n, m)) {
            return Some(c.clone());
        }
        let d = Arc::new(Dispersal::new(n, m, Mode::Systematic).ok()?);
        self.codecs.insert((n, m), d.clone());
        Some(d)
    }

    fn stripes(&self, len: usize) -> usize {
        len.div_ceil(self.cfg.stripe).max(1)
    }

    // ---- owner --------------------------------------------------------------------------

    /// Disperse the protected states as `version`: a SafeState with `replicas` when given.
    fn checkpoint(
        &mut self,
        version: u64,
        replicas: Option<usize>,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        if let Some(d) = &self.dispersing {
            return reject(out, format!("checkpoint {} is still dispersing", d.version));
        }
        if self
            .snapshots
            .keys()
            .next_back()
            .is_some_and(|&v| v >= version)
        {
            return reject(
                out,
                format!("checkpoint {version} is not newer than the last"),
            );
        }
        let live: Vec<NodeId> = self
            .view
            .iter()
            .copied()
            .filter(|x| self.cfg.agreed_views || !self.suspected.contains(x))
            .collect();
        let placement = Placement::new(self.cfg.scheme, &live, self.cfg.seed, self.cfg.backtracks);
        if matches!(self.cfg.scheme, Scheme::Xor { .. })
            && self.protected.keys().any(|&vid| vid != self.me.0)
        {
            return reject(
                out,
                "XOR sets keep one state per process, under its own id".into(),
            );
        }
        let safe = replicas.is_some();
        let replicas = replicas.unwrap_or(0).min(placement.max_replicas());
        self.note_version(version);
        if safe {
            self.pin(version);
        }
        // Buffers of the last checkpoint's parity that no holder or send queue still holds.
        for b in std::mem::take(&mut self.sent_parity) {
            if let Ok(b) = b.try_into_mut() {
                self.spare.push(Vec::from(b));
            }
        }
        let mut d = Dispersing {
            version,
            waiting: HashMap::new(),
            left: 0,
            pieces: 0,
            lost: 0,
        };
        let states = self.protected.clone();
        for (&vid, data) in &states {
            let Some((holders, m)) = placement.holders(vid) else {
                continue;
            };
            for s in 0..self.stripes(data.len()) {
                let stripe = data.slice(stripe_range(s, self.cfg.stripe, data.len()));
                let mut meta = PieceMeta {
                    scheme: self.cfg.scheme.byte(),
                    n: holders.len() as u8,
                    m: m as u8,
                    state_len: data.len() as u64,
                    stripe_len: self.cfg.stripe as u32,
                    crc32c: 0,
                    stripe_crc: 0,
                    safe,
                };
                let bodies = self.code(&placement, &holders, &stripe, m);
                let crcs: Vec<u32> = bodies.iter().map(|b| crc32c::crc32c(b)).collect();
                meta.stripe_crc = stripe_crc(
                    self.cfg.scheme,
                    &stripe,
                    &bodies,
                    &crcs,
                    m,
                    &mut self.shifts,
                );
                let copies: Vec<Vec<NodeId>> = (0..=replicas)
                    .filter_map(|r| placement.replica_holders(vid, r))
                    .collect();
                for (slot, (body, crc)) in bodies.into_iter().zip(crcs).enumerate() {
                    let key = PieceKey {
                        vid,
                        version,
                        stripe: s as u32,
                        slot: slot as u8,
                    };
                    meta.crc32c = crc;
                    let body = Payload::from_bytes(body);
                    let mut sent: Vec<NodeId> = Vec::with_capacity(copies.len());
                    for holder in copies.iter().filter_map(|c| c.get(slot).copied()) {
                        if sent.contains(&holder) {
                            continue; // a replica that wrapped onto the same holder
                        }
                        sent.push(holder);
                        d.pieces += 1;
                        if holder == self.me {
                            self.keep(key, meta, body.clone()); // the newest: kept
                        } else if self.suspected.contains(&holder) {
                            d.lost += 1;
                        } else {
                            *d.waiting.entry(holder).or_default() += 1;
                            d.left += 1;
                            let body = body.clone();
                            out.send(holder, StoreMsg::Put { key, meta, body });
                        }
                    }
                }
            }
        }
        self.snapshots.insert(
            version,
            Snapshot {
                placement,
                replicas,
                states,
            },
        );
        self.dispersing = Some(d);
        self.dispersed(out);
    }

    /// The bodies of one stripe, slot by slot: systematic IDA (the stripe's own bytes for the
    /// first `m`, parity encoded into fresh buffers for the rest), the stripe itself (partner),
    /// or its segments (XOR).
    fn code(&mut self, p: &Placement, holders: &[NodeId], stripe: &Bytes, m: usize) -> Vec<Bytes> {
        match p.scheme {
            Scheme::Partner => vec![stripe.clone()],
            Scheme::Xor { .. } => {
                let set = p
                    .group_of(self.me.0)
                    .map(|g| g.0.to_vec())
                    .unwrap_or_default();
                let seg = xor::seg_len(self.cfg.stripe, set.len());
                holders
                    .iter()
                    .map(|&h| {
                        let t = xor::rank_without(&set, self.me, h).unwrap_or(0);
                        stripe.slice(xor::segment(t, seg, stripe.len()))
                    })
                    .collect()
            }
            Scheme::Ida => {
                let n = holders.len();
                let Some(codec) = self.codec(n, m) else {
                    return Vec::new();
                };
                let l = codec.piece_len(stripe.len());
                let mut data: Vec<Bytes> = (0..m)
                    .map(|j| {
                        let at = (j * l).min(stripe.len());
                        let end = (at + l).min(stripe.len());
                        if end - at == l {
                            stripe.slice(at..end)
                        } else {
                            let mut padded = vec![0u8; l];
                            padded[..end - at].copy_from_slice(&stripe[at..end]);
                            Bytes::from(padded)
                        }
                    })
                    .collect();
                let mut parity: Vec<Vec<u8>> = (m..n).map(|_| self.parity_buffer(l)).collect();
                if l > 0 && !parity.is_empty() {
                    let chunks: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
                    let mut outs: Vec<&mut [u8]> =
                        parity.iter_mut().map(|p| p.as_mut_slice()).collect();
                    codec.encode_rows(&chunks, &mut outs);
                }
                let parity: Vec<Bytes> = parity.into_iter().map(Bytes::from).collect();
                self.sent_parity.extend(parity.iter().cloned());
                data.extend(parity);
                data
            }
        }
    }

    /// A buffer of `len` bytes for parity (the encoder overwrites all of it): a spare one when
    /// it fits, else fresh.
    fn parity_buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.iter().rposition(|b| b.capacity() >= len) {
            Some(i) => {
                let mut b = self.spare.swap_remove(i);
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    /// Report the checkpoint once nothing is waiting.
    fn dispersed(&mut self, out: &mut Outbox<StoreMsg, StorageEvent>) {
        if let Some(d) = self.dispersing.take_if(|d| d.left == 0) {
            out.report(StorageEvent::Checkpointed {
                version: d.version,
                pieces: d.pieces,
                lost: d.lost,
            });
        }
    }

    fn confirmed(&mut self, from: NodeId, kept: bool, out: &mut Outbox<StoreMsg, StorageEvent>) {
        if let Some(d) = &mut self.dispersing {
            if let Some(w) = d.waiting.get_mut(&from).filter(|w| **w > 0) {
                *w -= 1;
                d.left -= 1;
                if !kept {
                    d.lost += 1;
                }
            }
        }
        self.dispersed(out);
    }

    // ---- holder -------------------------------------------------------------------------

    /// Remember `version` and forget everything of versions older than the
    /// [`StorageConfig::keep_versions`] newest.
    fn note_version(&mut self, version: u64) {
        if self.versions.insert(version) {
            self.trim();
        }
    }

    /// Forget every version that is neither among the [`StorageConfig::keep_versions`]
    /// newest nor a pinned SafeState.
    fn trim(&mut self) {
        let keep = self.cfg.keep_versions.max(1);
        let old: Vec<u64> = self
            .versions
            .iter()
            .rev()
            .skip(keep)
            .copied()
            .filter(|v| !self.pinned.contains(v))
            .collect();
        for v in old {
            self.versions.remove(&v);
            self.forget(v);
        }
    }

    /// Keep SafeState `version` past the window; past [`StorageConfig::keep_safe`] the oldest
    /// leaves the pin (and, older than the window, is forgotten).
    fn pin(&mut self, version: u64) {
        if self.pinned.insert(version) {
            while self.pinned.len() > self.cfg.keep_safe.max(1) {
                self.pinned.pop_first();
            }
            self.trim();
        }
    }

    /// Drop the versions in `range` ([`Request::Discard`]).
    fn discard(&mut self, range: std::ops::Range<u64>) {
        let gone: Vec<u64> = self.versions.range(range.clone()).copied().collect();
        for v in gone {
            self.versions.remove(&v);
            self.pinned.remove(&v);
            self.forget(v);
        }
        // Confirmations still on their way find no dispersal and are ignored.
        self.dispersing.take_if(|d| range.contains(&d.version));
    }

    /// Free every piece, parity and snapshot of version `old`.
    fn forget(&mut self, old: u64) {
        let mut freed = 0;
        self.held.retain(|k, (_, body)| {
            let keep = k.version != old;
            if !keep {
                freed += body.len() as u64;
            }
            keep
        });
        self.parity.retain(|&(v, _), p| {
            let keep = v != old;
            if !keep {
                freed += p.len() as u64;
            }
            keep
        });
        self.xor_meta.retain(|k, _| k.version != old);
        for folds in self.relayed.values_mut() {
            folds.retain(|(k, _)| k.version != old);
        }
        self.snapshots.remove(&old);
        self.held_bytes = self.held_bytes.saturating_sub(freed);
    }

    /// Hold a piece; `false` when its version is already out of the window.
    fn keep(&mut self, key: PieceKey, meta: PieceMeta, body: Payload) -> bool {
        self.note_version(key.version);
        if !self.versions.contains(&key.version) {
            return false;
        }
        self.held_bytes += body.len() as u64;
        if let Some((_, old)) = self.held.insert(key, (meta, body)) {
            self.held_bytes = self.held_bytes.saturating_sub(old.len() as u64);
        }
        true
    }

    fn drop_from(&mut self, from: NodeId, out: &mut Outbox<StoreMsg, StorageEvent>) {
        if self.reported_drops.insert(from) {
            out.report(StorageEvent::Dropped { from });
        }
    }

    fn put(
        &mut self,
        from: NodeId,
        key: PieceKey,
        meta: PieceMeta,
        body: Payload,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        let len = body.len() as u64;
        let known = self.view.binary_search(&from).is_ok();
        let old = self.versions.first().is_some_and(|&v| key.version < v);
        if !known || old || self.held_bytes + len > self.cfg.quota {
            self.drop_from(from, out);
            return out.send(from, StoreMsg::Refused { key });
        }
        if meta.scheme == (Scheme::Xor { set: 0 }).byte() {
            // Folded into the parity, checked first: a damaged segment would spoil it unseen.
            if crc32c::crc32c(&body) != meta.crc32c {
                return out.send(from, StoreMsg::Refused { key });
            }
            self.note_version(key.version);
            let p = self.parity.entry((key.version, key.stripe)).or_default();
            if p.len() < body.len() {
                self.held_bytes += (body.len() - p.len()) as u64;
                p.resize(body.len(), 0);
            }
            xor::xor_into(p, &body);
            self.xor_meta.insert(PieceKey { slot: 0, ..key }, meta);
        } else {
            if meta.safe {
                self.pin(key.version);
            }
            if !self.keep(key, meta, body) {
                return out.send(from, StoreMsg::Refused { key });
            }
        }
        out.send(from, StoreMsg::Stored { key });
    }

    fn get(&mut self, from: NodeId, key: PieceKey, out: &mut Outbox<StoreMsg, StorageEvent>) {
        if self.view.binary_search(&from).is_err() {
            return self.drop_from(from, out);
        }
        match self.held.get(&key) {
            Some((meta, body)) => out.send(
                from,
                StoreMsg::Got {
                    key,
                    meta: *meta,
                    body: body.clone(),
                },
            ),
            None => out.send(from, StoreMsg::Missing { key }),
        }
    }

    /// One hop of an XOR rebuild: fold this process's share in and pass it on.
    fn fold(
        &mut self,
        key: PieceKey,
        mut chain: Vec<u64>,
        to: u64,
        body: Payload,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        let lost_key = PieceKey { slot: 0, ..key };
        let (Some(meta), Some(snap)) = (
            self.xor_meta.get(&lost_key),
            self.snapshots.get(&key.version),
        ) else {
            return out.send(NodeId(to), StoreMsg::Missing { key });
        };
        let meta = *meta;
        let Some((set, _)) = snap.placement.group_of(key.vid) else {
            return out.send(NodeId(to), StoreMsg::Missing { key });
        };
        let stripe_len = meta.stripe_len as usize;
        let lost_len = stripe_range(key.stripe as usize, stripe_len, meta.state_len as usize).len();
        if !body.is_empty() && body.len() != lost_len {
            return out.send(NodeId(to), StoreMsg::Missing { key });
        }
        let mut acc = if body.is_empty() {
            vec![0u8; lost_len]
        } else {
            body.to_vec()
        };
        let mine = snap.states.get(&self.me.0).cloned().unwrap_or_default();
        let my_stripe = &mine[stripe_range(key.stripe as usize, stripe_len, mine.len())];
        let parity = self
            .parity
            .get(&(key.version, key.stripe))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let seg = xor::seg_len(stripe_len, set.len());
        xor::fold(
            &mut acc,
            set,
            self.me,
            NodeId(key.vid),
            seg,
            parity,
            my_stripe,
        );
        let body = Payload::from_bytes(Bytes::from(acc));
        if chain.is_empty() {
            if to == self.me.0 {
                self.folded(key, meta, body, out);
            } else {
                out.send(NodeId(to), StoreMsg::Folded { key, meta, body });
            }
        } else {
            let next = NodeId(chain.remove(0));
            if self.suspected.contains(&next) {
                return self.fold_broken(key, to, out);
            }
            // Remembered until the version is forgotten: if `next` fails, `to` hears of it.
            self.relayed.entry(next).or_default().push((key, to));
            out.send(
                next,
                StoreMsg::Fold {
                    key,
                    chain,
                    to,
                    body,
                },
            );
        }
    }

    /// A fold cannot go on: its requester learns that the stripe is lost.
    fn fold_broken(&mut self, key: PieceKey, to: u64, out: &mut Outbox<StoreMsg, StorageEvent>) {
        if to == self.me.0 {
            self.lost_piece(self.me, key, out);
        } else {
            out.send(NodeId(to), StoreMsg::Missing { key });
        }
    }

    // ---- recoverer ----------------------------------------------------------------------

    fn recover(&mut self, vid: u64, version: u64, out: &mut Outbox<StoreMsg, StorageEvent>) {
        let Some(snap) = self.snapshots.get(&version) else {
            return reject(out, format!("this process took no checkpoint {version}"));
        };
        let placement = snap.placement.clone();
        let copies: Vec<Vec<NodeId>> = (0..=snap.replicas)
            .filter_map(|r| placement.replica_holders(vid, r))
            .collect();
        let Some((holders, m)) = placement.holders(vid) else {
            return unrecoverable(out, vid, version, "empty view".into());
        };
        if self.recoveries.contains_key(&(vid, version)) {
            return;
        }
        if let Scheme::Xor { .. } = placement.scheme {
            if let Some(gone) = holders.iter().find(|h| self.suspected.contains(h)) {
                let why = format!("XOR set lost {gone:?} too: one loss per set");
                return unrecoverable(out, vid, version, why);
            }
        }
        // An XOR rebuild comes back as one folded stripe.
        let m = if matches!(placement.scheme, Scheme::Xor { .. }) {
            1
        } else {
            m
        };
        let mut r = Recovery {
            placement,
            m,
            state_len: None,
            out: BytesMut::new(),
            stripes: Vec::new(),
            left: 1,
        };
        r.stripes.push(self.gather_plan(&copies));
        self.recoveries.insert((vid, version), r);
        self.ask(vid, version, 0, out);
    }

    /// The holders of a stripe in the order to ask them: this process first, then the rest
    /// that are not suspected, the neighborhood before its replicas, by slot.
    fn gather_plan(&self, copies: &[Vec<NodeId>]) -> Gather {
        let mut candidates: Vec<(usize, NodeId, u8)> = copies
            .iter()
            .enumerate()
            .flat_map(|(r, c)| c.iter().enumerate().map(move |(s, &h)| (r, h, s as u8)))
            .filter(|(_, h, _)| !self.suspected.contains(h))
            .collect();
        candidates.sort_by_key(|&(r, h, s)| (h != self.me, r, s));
        let mut seen = HashSet::new();
        candidates.retain(|c| seen.insert((c.1, c.2)));
        let candidates: Vec<(NodeId, u8)> = candidates.into_iter().map(|c| (c.1, c.2)).collect();
        Gather {
            tried: vec![false; candidates.len()],
            candidates,
            ..Gather::default()
        }
    }

    /// Ask for more pieces of stripe `s` until `m` are asked or got; fail the recovery when
    /// no holder is left.
    fn ask(&mut self, vid: u64, version: u64, s: usize, out: &mut Outbox<StoreMsg, StorageEvent>) {
        let me = self.me;
        let Some(r) = self.recoveries.get_mut(&(vid, version)) else {
            return;
        };
        if let Scheme::Xor { .. } = r.placement.scheme {
            // One fold along every survivor of the set, this process last when it is one.
            let g = &r.stripes[s];
            if g.next == 0 {
                let mut chain: Vec<u64> = g.candidates.iter().map(|c| c.0 .0).collect();
                chain.sort_by_key(|&c| c == me.0);
                let key = PieceKey {
                    vid,
                    version,
                    stripe: s as u32,
                    slot: 0,
                };
                r.stripes[s].next = 1;
                let first = NodeId(chain.remove(0));
                let body = Payload::default();
                if first == me {
                    self.fold(key, chain, me.0, body, out);
                } else {
                    out.send(
                        first,
                        StoreMsg::Fold {
                            key,
                            chain,
                            to: me.0,
                            body,
                        },
                    );
                }
            }
            return;
        }
        let m = r.m;
        let g = &mut r.stripes[s];
        let mut local = Vec::new();
        while g.asked.len() + g.got.len() < m {
            // The first holder not asked yet of a slot neither asked nor got: another replica
            // of a slot stays a candidate until that slot is in.
            let next = (0..g.candidates.len()).find(|&i| {
                let (h, slot) = g.candidates[i];
                !g.tried[i]
                    && !self.suspected.contains(&h)
                    && !g.asked.contains_key(&slot)
                    && g.got.iter().all(|p| p.0 != slot)
            });
            let Some(i) = next else {
                break;
            };
            g.tried[i] = true;
            let (h, slot) = g.candidates[i];
            g.asked.insert(slot, h);
            let key = PieceKey {
                vid,
                version,
                stripe: s as u32,
                slot,
            };
            if h == me {
                local.push(key);
            } else {
                out.send(h, StoreMsg::Get { key });
            }
        }
        let starved = g.asked.is_empty() && g.got.len() < m;
        if starved {
            let why = format!(
                "stripe {s}: {} valid pieces of the {m} needed survive",
                g.got.len()
            );
            self.recoveries.remove(&(vid, version));
            return unrecoverable(out, vid, version, why);
        }
        for key in local {
            match self.held.get(&key).cloned() {
                Some((meta, body)) => self.got(me, key, Some((meta, body)), out),
                None => self.got(me, key, None, out),
            }
        }
    }

    /// A holder's answer: a piece (checked) or none.
    fn got(
        &mut self,
        from: NodeId,
        key: PieceKey,
        piece: Option<(PieceMeta, Payload)>,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        let (vid, version, s) = (key.vid, key.version, key.stripe as usize);
        let Some(r) = self.recoveries.get_mut(&(vid, version)) else {
            return;
        };
        let Some(g) = r.stripes.get_mut(s) else {
            return;
        };
        if g.done || g.asked.get(&key.slot) != Some(&from) {
            return;
        }
        g.asked.remove(&key.slot);
        let valid = piece.filter(|(meta, body)| {
            crc32c::crc32c(body) == meta.crc32c
                && meta.stripe_len as usize == self.cfg.stripe
                && usize::from(meta.m) == r.m
                && r.state_len.is_none_or(|l| l == meta.state_len)
        });
        if let Some((meta, body)) = valid {
            g.meta.get_or_insert(meta);
            g.got.push((key.slot, body));
            if r.state_len.is_none() {
                self.sized(vid, version, meta.state_len, out);
            }
        }
        self.progress(vid, version, s, out);
    }

    /// The state's length is known: make room and ask for every other stripe.
    fn sized(
        &mut self,
        vid: u64,
        version: u64,
        len: u64,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        let stripes = self.stripes(len as usize);
        let Some(r) = self.recoveries.get_mut(&(vid, version)) else {
            return;
        };
        r.state_len = Some(len);
        r.out = BytesMut::zeroed(len as usize);
        let holders: Vec<(NodeId, u8)> = r.stripes[0].candidates.clone();
        for _ in 1..stripes {
            r.stripes.push(Gather {
                tried: vec![false; holders.len()],
                candidates: holders.clone(),
                ..Gather::default()
            });
        }
        r.left = stripes;
        for s in 1..stripes {
            self.ask(vid, version, s, out);
        }
    }

    /// Rebuild stripe `s` once `m` pieces are in, or ask for more.
    fn progress(
        &mut self,
        vid: u64,
        version: u64,
        s: usize,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        // The coding, from the cache: made here, per stripe, it would invert its matrix anew.
        let codec = match self.recoveries.get(&(vid, version)) {
            Some(r) if r.placement.scheme == Scheme::Ida => match r.stripes[s].meta {
                Some(meta) => self.codec(usize::from(meta.n), r.m),
                None => None,
            },
            _ => None,
        };
        let Some(r) = self.recoveries.get_mut(&(vid, version)) else {
            return;
        };
        let g = &mut r.stripes[s];
        if g.got.len() < r.m {
            return self.ask(vid, version, s, out);
        }
        let (Some(meta), Some(len)) = (g.meta, r.state_len) else {
            return;
        };
        let range = stripe_range(s, self.cfg.stripe, len as usize);
        let n = usize::from(meta.n);
        g.done = true;
        let pieces: Vec<(u8, Payload)> = std::mem::take(&mut g.got);
        let dst = &mut r.out[range.clone()];
        let rebuilt = match r.placement.scheme {
            Scheme::Partner | Scheme::Xor { .. } => match pieces.first() {
                Some((_, body)) if body.len() == dst.len() => {
                    dst.copy_from_slice(body);
                    Ok(())
                }
                _ => Err("a piece of the wrong length".to_string()),
            },
            Scheme::Ida => match codec {
                Some(codec) => {
                    let refs: Vec<(u8, &[u8])> = pieces.iter().map(|(i, b)| (*i, &b[..])).collect();
                    codec.decode_into(&refs, dst).map_err(|e| e.to_string())
                }
                None => Err(format!("no IDA coding for n = {n}, m = {}", r.m)),
            },
        };
        let checked = rebuilt.and_then(|()| {
            if crc32c::crc32c(&r.out[range]) == meta.stripe_crc {
                Ok(())
            } else {
                Err("the rebuilt stripe does not match its CRC-32C".into())
            }
        });
        if let Err(e) = checked {
            self.recoveries.remove(&(vid, version));
            return unrecoverable(out, vid, version, format!("stripe {s}: {e}"));
        }
        r.left -= 1;
        if r.left == 0 {
            if let Some(r) = self.recoveries.remove(&(vid, version)) {
                out.report(StorageEvent::Recovered {
                    vid,
                    version,
                    data: r.out.freeze(),
                });
            }
        }
    }

    fn folded(
        &mut self,
        key: PieceKey,
        meta: PieceMeta,
        body: Payload,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        let meta = PieceMeta {
            crc32c: crc32c::crc32c(&body),
            m: 1,
            ..meta
        };
        if let Some(g) = self
            .recoveries
            .get_mut(&(key.vid, key.version))
            .and_then(|r| r.stripes.get_mut(key.stripe as usize))
        {
            g.asked.insert(0, self.me);
        }
        self.got(self.me, key, Some((meta, body)), out);
    }

    /// A holder answered that it has nothing, or went away: ask the next one.
    fn lost_piece(
        &mut self,
        from: NodeId,
        key: PieceKey,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        if self.recovering_xor(key) {
            self.recoveries.remove(&(key.vid, key.version));
            let why = format!("stripe {}: {from:?} cannot fold its share", key.stripe);
            return unrecoverable(out, key.vid, key.version, why);
        }
        self.got(from, key, None, out);
    }

    fn recovering_xor(&self, key: PieceKey) -> bool {
        self.recoveries
            .get(&(key.vid, key.version))
            .is_some_and(|r| matches!(r.placement.scheme, Scheme::Xor { .. }))
    }
}

/// Bytes of stripe `s` of a state of `len` bytes cut in stripes of `stripe` (empty past the end).
fn stripe_range(s: usize, stripe: usize, len: usize) -> std::ops::Range<usize> {
    let at = s.saturating_mul(stripe).min(len);
    at..(at + stripe).min(len)
}

/// The CRC-32C of a stripe's data, from its pieces' CRCs where they are the data (systematic
/// IDA's first `m`, partner's copy, XOR's segments, all in order), so that checking a rebuild
/// costs no second pass at checkpoint time.
fn stripe_crc(
    scheme: Scheme,
    stripe: &[u8],
    bodies: &[Bytes],
    crcs: &[u32],
    m: usize,
    shifts: &mut HashMap<usize, Shift>,
) -> u32 {
    let data_pieces = match scheme {
        Scheme::Ida => m.min(bodies.len()),
        Scheme::Partner | Scheme::Xor { .. } => bodies.len(),
    };
    let mut crc = 0;
    let mut at = 0;
    for (body, &piece_crc) in bodies.iter().zip(crcs).take(data_pieces) {
        let end = (at + body.len()).min(stripe.len());
        if end - at == body.len() {
            if shifts.len() > 64 && !shifts.contains_key(&body.len()) {
                shifts.clear(); // lengths are few (a stripe's pieces, its last one); bound them
            }
            let shift = shifts
                .entry(body.len())
                .or_insert_with(|| Shift::new(body.len()));
            crc = shift.combine(crc, piece_crc);
        } else {
            // Systematic IDA's last data piece, padded with zeros past the stripe's end.
            crc = crc32c::crc32c_append(crc, &stripe[at..end]);
        }
        at = end;
    }
    crc
}

fn reject(out: &mut Outbox<StoreMsg, StorageEvent>, why: String) {
    out.report(StorageEvent::Rejected { why });
}

fn unrecoverable(out: &mut Outbox<StoreMsg, StorageEvent>, vid: u64, version: u64, why: String) {
    out.report(StorageEvent::Unrecoverable { vid, version, why });
}

impl Protocol for Storage {
    type Msg = StoreMsg;
    type Event = StorageEvent;
    type Request = Request;

    fn on_start(&mut self, _now: Time, _out: &mut Outbox<StoreMsg, StorageEvent>) {}

    fn on_message(
        &mut self,
        _now: Time,
        from: NodeId,
        msg: StoreMsg,
        out: &mut Outbox<StoreMsg, StorageEvent>,
    ) {
        match msg {
            StoreMsg::Put { key, meta, body } => self.put(from, key, meta, body, out),
            StoreMsg::Stored { .. } => self.confirmed(from, true, out),
            StoreMsg::Refused { .. } => self.confirmed(from, false, out),
            StoreMsg::Get { key } => self.get(from, key, out),
            StoreMsg::Got { key, meta, body } => {
                if self.recovering_xor(key) {
                    return; // XOR rebuilds come back as Folded, never as one piece
                }
                self.got(from, key, Some((meta, body)), out)
            }
            StoreMsg::Missing { key } => self.lost_piece(from, key, out),
            StoreMsg::Fold {
                key,
                chain,
                to,
                body,
            } => {
                if self.view.binary_search(&from).is_err() || chain.len() >= self.view.len() {
                    return self.drop_from(from, out);
                }
                self.fold(key, chain, to, body, out)
            }
            StoreMsg::Folded { key, meta, body } => {
                if self.recovering_xor(key) {
                    self.folded(key, meta, body, out);
                }
            }
        }
        self.version_counter += 1;
    }

    fn on_timer(&mut self, _now: Time, _timer: TimerId, _out: &mut Outbox<StoreMsg, StorageEvent>) {
    }

    fn on_suspect(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<StoreMsg, StorageEvent>) {
        // Not only the first time: a piece asked of a peer already suspected (a dial refused
        // again) must be asked elsewhere too.
        self.suspected.insert(peer);
        // Pieces it was to keep are lost: the checkpoint tolerates that many fewer losses.
        if let Some(d) = &mut self.dispersing {
            if let Some(w) = d.waiting.remove(&peer) {
                d.left -= w;
                d.lost += w;
            }
        }
        self.dispersed(out);
        // Pieces asked of it will not come: ask others (or fail an XOR fold through it).
        let mut waiting = Vec::new();
        for (&(vid, version), r) in &self.recoveries {
            for (s, g) in r.stripes.iter().enumerate() {
                for (&slot, _) in g.asked.iter().filter(|&(_, &h)| h == peer) {
                    let stripe = s as u32;
                    waiting.push(PieceKey {
                        vid,
                        version,
                        stripe,
                        slot,
                    });
                }
            }
        }
        let xor_through: Vec<(u64, u64)> = self
            .recoveries
            .iter()
            .filter(|(_, r)| matches!(r.placement.scheme, Scheme::Xor { .. }))
            .filter(|(_, r)| {
                r.stripes
                    .first()
                    .is_some_and(|g| g.candidates.iter().any(|c| c.0 == peer))
            })
            .map(|(&k, _)| k)
            .collect();
        for (key, to) in self.relayed.remove(&peer).unwrap_or_default() {
            self.fold_broken(key, to, out);
        }
        for (vid, version) in xor_through {
            self.recoveries.remove(&(vid, version));
            unrecoverable(
                out,
                vid,
                version,
                format!("{peer:?} of the XOR set failed during the rebuild"),
            );
        }
        for key in waiting {
            self.got(peer, key, None, out);
        }
        self.version_counter += 1;
    }

    fn on_request(&mut self, _now: Time, req: Request, out: &mut Outbox<StoreMsg, StorageEvent>) {
        self.request(req, out);
    }

    fn state_version(&self) -> u64 {
        self.version_counter
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
