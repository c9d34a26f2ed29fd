//! Neighborhood storage for a runtime: one node per process that keeps its states dispersed
//! across the job and rebuilds anyone's, in the manner of FTI and VeloC.
//!
//! ```no_run
//! use weft::storage::StorageConfig;
//! use weft::transport::storage::Checkpointer;
//! # fn spec() -> weft::transport::NodeSpec { unimplemented!() }
//! let store = Checkpointer::spawn(spec(), &Default::default(), StorageConfig::default())?;
//! store.protect(7, vec![42u8; 1 << 20]);   // this process's state, under virtual id 7
//! store.checkpoint(1)?;                    // dispersed: every holder has its piece
//! // ... process 7 dies; on any survivor:
//! let state = store.recover(7, None)?;     // rebuilt from any m pieces, checked
//! # Ok::<(), weft::transport::storage::StoreError>(())
//! ```

use super::handle::{Handle, Silence};
use super::{NodeOptions, NodeSpec};
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::storage::StorageEvent;
use crate::storage::{Request, Storage, StorageConfig};
use crate::NodeId;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

/// Events kept for [`Checkpointer::take_news`]: a bound, so a runtime that never asks does not
/// grow without end.
pub const NEWS_KEPT: usize = 1024;

/// Why a storage call failed. Never wrong data: a state that cannot be rebuilt exactly is one
/// of these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Too few valid pieces survive, or the rebuild did not match its checksum.
    #[error("state {vid} of checkpoint {version} cannot be rebuilt: {why}")]
    Unrecoverable {
        /// The virtual id.
        vid: u64,
        /// The checkpoint.
        version: u64,
        /// Why.
        why: String,
    },
    /// The node refused the request (an old version, a checkpoint still dispersing...).
    #[error("storage refused the request: {0}")]
    Rejected(String),
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The node could not start or has stopped.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A checkpoint, as its owner saw it confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpointed {
    /// Pieces made of this process's states.
    pub pieces: u64,
    /// Of those, pieces a holder refused or that went to a failed holder.
    pub lost: u64,
}

/// A storage node and its application's handle on it. Calls block until the node answers.
pub struct Checkpointer {
    node: Handle<Storage>,
    /// What came while a call waited for its answer and was not it (see [`Self::take_news`]).
    news: RefCell<VecDeque<NodeEvent<StorageEvent>>>,
    /// Longest wait for an answer (default 60 s).
    pub timeout: Duration,
}

impl Checkpointer {
    /// Start this process's storage node: `spec` names it and every peer of the job (its
    /// view, which the membership service updates through [`Checkpointer::view`]).
    pub fn spawn(
        spec: NodeSpec,
        opts: &NodeOptions,
        cfg: StorageConfig,
    ) -> Result<Self, StoreError> {
        let mut view: Vec<NodeId> = spec.peers.keys().copied().collect();
        view.push(spec.id);
        let proto = Storage::new(spec.id, &view, cfg);
        Ok(Self {
            node: Handle::spawn(spec, opts, proto)?,
            news: RefCell::new(VecDeque::new()),
            timeout: Duration::from_secs(60),
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    fn ask(&self, r: Request) {
        self.node.request(r);
    }

    /// Keep `data` under virtual id `vid` from the next checkpoint on.
    pub fn protect(&self, vid: u64, data: impl Into<Bytes>) {
        self.ask(Request::Protect {
            vid,
            data: data.into(),
        });
    }

    /// The live view changed: later checkpoints draw their neighborhoods over `live`.
    pub fn view(&self, live: Vec<NodeId>) {
        self.ask(Request::View(live));
    }

    /// Disperse every protected state as checkpoint `version` (increasing); returns once every
    /// live holder confirmed its piece.
    pub fn checkpoint(&self, version: u64) -> Result<Checkpointed, StoreError> {
        self.ask(Request::Checkpoint { version });
        self.answer(|e| match *e {
            StorageEvent::Checkpointed {
                version: v,
                pieces,
                lost,
            } if v == version => Some(Ok(Checkpointed { pieces, lost })),
            _ => None,
        })
    }

    /// Rebuild `vid`'s state of checkpoint `version` (this process's latest when `None`).
    pub fn recover(&self, vid: u64, version: Option<u64>) -> Result<Bytes, StoreError> {
        self.ask(Request::Recover { vid, version });
        self.answer(|e| match e {
            StorageEvent::Recovered { vid: v, data, .. } if *v == vid => Some(Ok(data.clone())),
            StorageEvent::Unrecoverable {
                vid: v,
                version,
                why,
            } if *v == vid => Some(Err(StoreError::Unrecoverable {
                vid,
                version: *version,
                why: why.clone(),
            })),
            _ => None,
        })
    }

    /// Everything the node told while calls waited for their answers and that was not one:
    /// a holder suspected or a connection refused (the protocol works around them; a runtime
    /// may want to know), pieces dropped from a stranger. The newest [`NEWS_KEPT`] are kept.
    pub fn take_news(&self) -> Vec<NodeEvent<StorageEvent>> {
        self.news.borrow_mut().drain(..).collect()
    }

    /// The next of that news, or of what the node tells from now on, within `timeout`.
    pub fn next_news(&self, timeout: Duration) -> Result<NodeEvent<StorageEvent>, Silence> {
        if let Some(ev) = self.news.borrow_mut().pop_front() {
            return Ok(ev);
        }
        self.node.next_event(timeout)
    }

    fn keep(&self, ev: NodeEvent<StorageEvent>) {
        let mut news = self.news.borrow_mut();
        if news.len() == NEWS_KEPT {
            news.pop_front();
        }
        news.push_back(ev);
    }

    /// Wait for the event `pick` takes; a rejection is an error. Others are kept as news.
    fn answer<T>(
        &self,
        pick: impl Fn(&StorageEvent) -> Option<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let got = self.node.wait_for(
            self.timeout,
            |ev| match ev {
                StorageEvent::Rejected { why } => Some(Err(StoreError::Rejected(why))),
                ev => pick(&ev).or_else(|| {
                    self.keep(NodeEvent::Protocol(ev));
                    None
                }),
            },
            |ev| self.keep(ev),
        );
        match got {
            Ok(r) => r,
            Err(Silence::Timeout(t)) => Err(StoreError::Timeout(t)),
            Err(Silence::Gone) => Err(EngineError::Gone.into()),
        }
    }

    /// `n` storage nodes on loopback, every one knowing every other (one per thread: a job's
    /// processes in miniature, for trying a runtime's checkpoints in one program).
    pub fn on_loopback(
        n: usize,
        opts: &NodeOptions,
        cfg: &StorageConfig,
    ) -> Result<Vec<Self>, StoreError> {
        super::loopback_specs(n, opts)?
            .into_iter()
            .map(|spec| Self::spawn(spec, opts, cfg.clone()))
            .collect()
    }

    /// Stop the node (its peers see it fail).
    pub fn stop(self) -> Result<(), StoreError> {
        self.node.stop()?;
        Ok(())
    }
}
