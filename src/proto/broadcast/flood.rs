//! Broadcasting without total order (section 6.1): the sender is the root of its own tree, the
//! same structure over the same table with the sender swapped into POID 0 (Figure 9, so most
//! connections are the coordinator tree's), and its ModLog stamp tells every process which
//! table to lay that tree over.

use super::{Broadcast, OrderEvent, OrderMsg, Seen};
use crate::buf::Payload;
use crate::proto::order::{PoTable, Stamp};
use crate::proto::{Event, Outbox};
use crate::topology::order::Rooting;
use crate::NodeId;

/// A flood waiting for the modifications its stamp names.
#[derive(Debug)]
struct Held {
    origin: NodeId,
    seq: u64,
    stamp: Stamp,
    body: Payload,
}

/// This process's floods: its numbering, what it has seen, what waits.
#[derive(Debug, Default)]
pub(super) struct FloodState {
    seq: u64,
    seen: Seen,
    held: Vec<Held>,
}

impl Broadcast {
    /// Broadcast `body` without total order, down the tree rooted here; returns its number.
    pub fn flood(&mut self, body: Payload, out: &mut Outbox<OrderMsg>) -> u64 {
        self.flood.seq += 1;
        let seq = self.flood.seq;
        self.flood.seen.insert((self.me, seq));
        let stamp = self.log.stamp();
        let table = self.log.table().clone();
        self.flood_deliver(self.me, seq, stamp, body, &table, out);
        seq
    }

    /// The number of this process's last flood.
    pub fn flood_seq(&self) -> u64 {
        self.flood.seq
    }

    /// A flood came.
    pub(super) fn on_flood(
        &mut self,
        _from: NodeId,
        origin: NodeId,
        seq: u64,
        stamp: Stamp,
        body: Payload,
        out: &mut Outbox<OrderMsg>,
    ) {
        if !self.is_member() || !self.flood.seen.insert((origin, seq)) {
            return;
        }
        match self.log.table_at(stamp) {
            Some(table) => self.flood_deliver(origin, seq, stamp, body, &table, out),
            None if stamp > self.log.stamp() => self.flood.held.push(Held {
                origin,
                seq,
                stamp,
                body,
            }),
            None => {
                // From before the last two clearings: the current table is the best guess.
                let table = self.log.table().clone();
                self.flood_deliver(origin, seq, stamp, body, &table, out);
            }
        }
    }

    /// Floods waiting for modifications this process has now applied.
    pub(super) fn flood_retry(&mut self, out: &mut Outbox<OrderMsg>) {
        if self.flood.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.flood.held);
        for h in held {
            match self.log.table_at(h.stamp) {
                Some(table) => self.flood_deliver(h.origin, h.seq, h.stamp, h.body, &table, out),
                None => self.flood.held.push(h),
            }
        }
    }

    fn flood_deliver(
        &mut self,
        origin: NodeId,
        seq: u64,
        stamp: Stamp,
        body: Payload,
        table: &PoTable,
        out: &mut Outbox<OrderMsg>,
    ) {
        let down = |i: NodeId| self.suspected.contains(&i);
        if let Some(tree) = table.tree_rooted_at(self.cfg.structure, Rooting::Swap, origin, down) {
            for c in tree.children(self.me) {
                out.send(
                    c,
                    OrderMsg::Flood {
                        origin,
                        seq,
                        stamp,
                        body: body.clone(),
                    },
                );
            }
        }
        out.report(Event::Order(OrderEvent::Flooded {
            origin,
            seq,
            at: self.now,
        }));
    }
}
