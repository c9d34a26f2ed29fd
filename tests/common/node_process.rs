//! A one-node job as a real `weft node` process, with its report lines as they come.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use weft::wire::handshake::JobKey;

/// A one-node job (`weft node`, job key `key`, blocking reactor, backend `backend` or the
/// automatic choice); the process, where it listens and its report lines after the first.
pub fn start_node(key: &JobKey, backend: Option<&str>) -> (Child, SocketAddr, Receiver<String>) {
    start_node_with(key, backend, "block")
}

/// [`start_node`] with the reactor waiting as `wait` says.
pub fn start_node_with(
    key: &JobKey,
    backend: Option<&str>,
    wait: &str,
) -> (Child, SocketAddr, Receiver<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.args(["node", "--id", "0", "--nodes", "1", "--peers", ""])
        .args(["--wait", wait])
        .env_remove("WEFT_BACKEND")
        .env("WEFT_JOB_KEY", key.to_hex())
        .stdout(Stdio::piped());
    if let Some(b) = backend {
        cmd.args(["--backend", b]);
    }
    let mut child = cmd.spawn().expect("run weft node");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a first line").expect("read");
    let v: serde_json::Value = serde_json::from_str(&first).expect("json");
    let addr = v["listening"].as_str().expect("listening").parse().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    (child, addr, rx)
}
