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
/// The longest peer-list line read from stdin: [`super::MAX_JOB`] entries of
/// `ID=[IPv6]:PORT,` fit (64 bytes each); more is not a peer list, and is not read.
pub const MAX_PEERS_LINE: u64 = 64 * super::MAX_JOB as u64;

/// Node side: read the job's peer list (one line, at most [`MAX_PEERS_LINE`] bytes).
pub fn read_peers(input: &mut impl BufRead) -> Result<PeerList, BootstrapError> {
    let mut line = Vec::new();
    match std::io::Read::take(&mut *input, MAX_PEERS_LINE + 1).read_until(b'\n', &mut line) {
        Ok(0) => Err(BootstrapError::Exchange(
            "stdin closed before the peer list came".into(),
        )),
        Ok(n) if n as u64 > MAX_PEERS_LINE => Err(BootstrapError::Exchange(format!(
            "the peer list on stdin is longer than {MAX_PEERS_LINE} bytes: not a peer list"
        ))),
        Ok(_) => match std::str::from_utf8(&line) {
            Ok(text) => PeerList::parse(text, "the peer list on stdin"),
            Err(_) => Err(BootstrapError::Exchange(
                "the peer list on stdin is not UTF-8".into(),
            )),
        },
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

    /// A line without end is read up to the bound and refused; a long bad entry is named by
    /// its start, not repeated whole.
    #[test]
    fn a_huge_peer_list_is_bounded_and_a_huge_entry_is_not_echoed() {
        let endless = std::io::repeat(b'1');
        let err = read_peers(&mut std::io::BufReader::new(endless)).unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
        let entry = format!("0={}\n", "9".repeat(50_000_000));
        let err = read_peers(&mut entry.as_bytes()).unwrap_err().to_string();
        assert!(err.len() < 400 && err.contains("(50000002 bytes)"), "{err}");
    }
}
