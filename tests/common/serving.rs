//! Proof that a node survived what a test did to it: it still serves a legitimate peer.

use super::events::wait_done;
use weft::proto::ping::PingPong;
use weft::transport::{Cluster, NodeOptions};
use weft::wire::handshake::JobKey;
use weft::NodeId;

/// Node 1 of `c` (a ponger) still serves a legitimate peer: a fresh node 0 (job key `key`,
/// options `opts`), in place of the cluster's own, pings it to the end. Node 1 learns the
/// new node 0's address.
pub fn still_serves(mut c: Cluster<PingPong>, key: JobKey, opts: NodeOptions) {
    let ponger = c.nodes.pop().unwrap();
    c.nodes.pop().unwrap().stop().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let l = weft::transport::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    ponger.add_peer(NodeId(0), l.local_addr().unwrap());
    let peers = [(ponger.id, ponger.addr)].into_iter().collect();
    let o = NodeOptions {
        key: Some(key.clone()),
        ..opts
    };
    let spec = weft::transport::NodeSpec {
        id: NodeId(0),
        listener: l,
        peers,
        key,
        core: None,
    };
    let _p =
        weft::transport::spawn(spec, &o, PingPong::pinger(ponger.id, vec![32], 10, 0), tx).unwrap();
    wait_done(&rx, 10, "node stopped serving");
}
