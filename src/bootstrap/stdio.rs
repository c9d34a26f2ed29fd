//! weft's own launch exchange, over a child's stdin and stdout: each node binds its listener,
//! says where (`{"listening": "ADDR"}`, its first line out), and reads the whole job's
//! `ID=ADDR,...` list as its first line in. The launcher (`bench --procs`) reads every child's
//! first line, then writes the list to all of them. Both halves are here.

use super::{BootstrapError, PeerList};
use std::io::{BufRead, Write};
use std::net::SocketAddr;

/// Node side: say where this node listens, as its first line of output.
pub fn announce(out: &mut impl Write, addr: SocketAddr) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::json!({ "listening": addr.to_string() })
    )?;
    out.flush()
}

/// Node side: read the job's peer list, one line.
pub fn read_peers(input: &mut impl BufRead) -> Result<PeerList, BootstrapError> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) => Err(BootstrapError::Exchange(
            "stdin closed before the peer list came".into(),
        )),
        Ok(_) => PeerList::parse(&line, "the peer list on stdin"),
        Err(e) => Err(BootstrapError::Exchange(format!("read stdin: {e}"))),
    }
}

/// Launcher side: where a node listens, from its first line of output.
pub fn parse_listening(line: &str) -> Result<SocketAddr, BootstrapError> {
    let bad =
        || BootstrapError::Exchange(format!("expected {{\"listening\": ADDR}}, got {line:?}"));
    let v: serde_json::Value = serde_json::from_str(line).map_err(|_| bad())?;
    v["listening"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .ok_or_else(bad)
}

/// Launcher side: hand a node the job's peer list.
pub fn send_peers(stdin: &mut impl Write, peers: &PeerList) -> std::io::Result<()> {
    writeln!(stdin, "{}", peers.to_line())?;
    stdin.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;
    use std::collections::HashMap;

    /// What a node announces, its launcher reads; what the launcher sends, the node reads.
    #[test]
    fn both_halves_understand_each_other() {
        let addr: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        let mut said = Vec::new();
        announce(&mut said, addr).unwrap();
        let line = String::from_utf8(said).unwrap();
        assert_eq!(parse_listening(line.trim()).unwrap(), addr);
        assert!(parse_listening("{\"listening\": 3}").is_err());
        let peers = PeerList::from_map(HashMap::from([(NodeId(0), addr), (NodeId(1), addr)]));
        let mut wire = Vec::new();
        send_peers(&mut wire, &peers).unwrap();
        assert_eq!(read_peers(&mut &wire[..]).unwrap(), peers);
        assert!(matches!(
            read_peers(&mut &b""[..]),
            Err(BootstrapError::Exchange(_))
        ));
    }
}
