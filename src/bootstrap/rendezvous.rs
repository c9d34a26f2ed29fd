//! Rank 0's rendezvous: where a job's processes trade addresses when the launcher offers no
//! key-value space (Slurm, Open MPI, the env launcher). Rank 0 listens on a port every process
//! computes from the job's id; each other rank registers its address; once all have, rank 0
//! answers each with the whole list. Both directions are tagged with the job key, bound to the
//! job id and, for the answer, to the registration's fresh nonce: a process outside the job can
//! neither register nor hand out a list, and a recorded answer is no answer to a new
//! registration.
//!
//! ```text
//! rank r -> 0:  weft-rendezvous/1 register R ADDR NONCE TAG    TAG = key("register", job, R, ADDR, NONCE)
//! 0 -> rank r:  weft-rendezvous/1 peers LIST EXTRA TAG         TAG = key("peers", job, NONCE, LIST, EXTRA)
//! 0 -> anyone:  weft-rendezvous/1 error WHY                    (untagged, informational)
//! ```
//!
//! A registration that does not check is answered with an error line and closed; rank 0 waits
//! on for the real ones. A rank that registers again (a process restarted during start-up)
//! replaces its earlier registration. Everything is bounded by the start-up deadline: a rank
//! that never comes is an error naming the missing ranks.

use super::{BootstrapError, PeerList};
use crate::wire::handshake::JobKey;
use crate::NodeId;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The protocol's first word.
const PROTOCOL: &str = "weft-rendezvous/1";

/// Longest line either side reads: a registration is short; a list is ~30 bytes per rank.
const LINE_MAX: usize = 64 + 40 * 1_000_000;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn fail(why: impl Into<String>) -> BootstrapError {
    BootstrapError::Exchange(why.into())
}

/// Read one line of at most [`LINE_MAX`] bytes.
fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    let n = r.take(LINE_MAX as u64 + 1).read_line(&mut line)?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    if n > LINE_MAX {
        return Err(std::io::Error::other("line too long"));
    }
    Ok(line.trim_end().to_string())
}

fn register_tag(key: &JobKey, job: &str, rank: u32, addr: &str, nonce: &str) -> String {
    let r = rank.to_string();
    hex(&key.tag(
        b"register",
        &[
            job.as_bytes(),
            r.as_bytes(),
            addr.as_bytes(),
            nonce.as_bytes(),
        ],
    ))
}

fn peers_tag(key: &JobKey, job: &str, nonce: &str, list: &str, extra: &str) -> String {
    hex(&key.tag(
        b"peers",
        &[
            job.as_bytes(),
            nonce.as_bytes(),
            list.as_bytes(),
            extra.as_bytes(),
        ],
    ))
}

/// What rank 0 may hand out beside the list (one word, `-` for nothing).
fn extra_word(extra: Option<&str>) -> Result<String, BootstrapError> {
    match extra {
        None => Ok("-".into()),
        Some(e) if !e.is_empty() && e != "-" && !e.contains(char::is_whitespace) => Ok(e.into()),
        Some(e) => Err(fail(format!("rendezvous: {e:?} cannot be handed out"))),
    }
}

/// Constant-time comparison of two tags.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A checked registration: rank, address, nonce.
fn parse_register(
    line: &str,
    key: &JobKey,
    job: &str,
    size: u32,
) -> Result<(u32, SocketAddr, String), String> {
    let w: Vec<&str> = line.split(' ').collect();
    let [proto, "register", rank, addr, nonce, tag] = w[..] else {
        return Err(format!(
            "not a registration: {:?}",
            &line[..line.len().min(80)]
        ));
    };
    if proto != PROTOCOL {
        return Err(format!("protocol {proto:?}, expected {PROTOCOL}"));
    }
    if !same(
        tag,
        &register_tag(key, job, rank.parse().unwrap_or(u32::MAX), addr, nonce),
    ) {
        return Err("the registration's tag does not check (another job, or no key)".into());
    }
    let rank: u32 = rank.parse().map_err(|_| format!("rank {rank:?}"))?;
    if rank == 0 || rank >= size {
        return Err(format!("rank {rank} is not in 1..{size}"));
    }
    let addr: SocketAddr = addr.parse().map_err(|_| format!("address {addr:?}"))?;
    Ok((rank, addr, nonce.to_string()))
}

/// Rank 0: serve the rendezvous on `listener` until every rank of `size` has registered, and
/// give each the whole list (with `mine`, rank 0's own address) and `extra` (one word, for
/// whatever else the job needs from rank 0). The list.
pub fn serve(
    listener: TcpListener,
    key: &JobKey,
    job: &str,
    size: u32,
    mine: SocketAddr,
    extra: Option<&str>,
    deadline: Instant,
) -> Result<PeerList, BootstrapError> {
    let extra = extra_word(extra)?;
    use std::os::fd::AsRawFd;
    listener
        .set_nonblocking(true)
        .map_err(|e| fail(format!("rendezvous: {e}")))?;
    // Each connection's registration is read on a thread of its own, so a silent stranger
    // holds up nobody; registrations come back here.
    let (tx, rx) = mpsc::channel::<(TcpStream, String)>();
    let mut registered: HashMap<u32, (SocketAddr, String, TcpStream)> = HashMap::new();
    while registered.len() + 1 < size as usize {
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<u32> = (1..size).filter(|r| !registered.contains_key(r)).collect();
            return Err(fail(format!(
                "rendezvous: ranks {missing:?} had not registered by the start-up deadline"
            )));
        }
        // Wait for a connection, at most a short while: registrations read meanwhile are
        // taken below.
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let wait = deadline
            .saturating_duration_since(now)
            .min(Duration::from_millis(20));
        // SAFETY: one valid pollfd, for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
        while let Ok((stream, _)) = listener.accept() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                let Ok(reader) = stream.try_clone() else {
                    return;
                };
                if let Ok(line) = read_line(&mut BufReader::new(reader)) {
                    let _ = tx.send((stream, line));
                }
            });
        }
        while let Ok((mut stream, line)) = rx.try_recv() {
            match parse_register(&line, key, job, size) {
                Ok((rank, addr, nonce)) => {
                    registered.insert(rank, (addr, nonce, stream));
                }
                Err(why) => {
                    let _ = writeln!(stream, "{PROTOCOL} error {why}");
                }
            }
        }
    }
    let mut map: HashMap<NodeId, SocketAddr> = registered
        .iter()
        .map(|(&r, (a, _, _))| (NodeId(u64::from(r)), *a))
        .collect();
    map.insert(NodeId(0), mine);
    let list = PeerList::from_map(map);
    let line = list.to_line();
    for (_, (_, nonce, mut stream)) in registered {
        let tag = peers_tag(key, job, &nonce, &line, &extra);
        let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
        let _ = writeln!(stream, "{PROTOCOL} peers {line} {extra} {tag}");
    }
    Ok(list)
}

/// Bind rank 0's rendezvous on `port` of every interface.
pub fn listen(port: u16) -> Result<TcpListener, BootstrapError> {
    let addr: SocketAddr = ([0, 0, 0, 0], port).into();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .and_then(|s| {
            s.set_reuse_address(true)?;
            s.bind(&addr.into())?;
            s.listen(1024)?;
            Ok(s)
        })
        .map_err(|e| {
            fail(format!(
                "rendezvous: cannot listen on port {port} ({e}); another job or service may hold \
                 it: set WEFT_RENDEZVOUS=HOST:PORT to rank 0's host and a free port"
            ))
        })?;
    Ok(sock.into())
}

/// Rank `rank` (not 0): register `mine` at the rendezvous on `host:port`, trying again while
/// nothing listens there (rank 0 may start later), and read the job's list and rank 0's
/// extra word.
pub fn join(
    host: &str,
    port: u16,
    key: &JobKey,
    job: &str,
    rank: u32,
    mine: SocketAddr,
    deadline: Instant,
) -> Result<(PeerList, Option<String>), BootstrapError> {
    let target = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("rendezvous host {host:?}: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("rendezvous host {host:?} has no address")))?;
    let mut pause = Duration::from_millis(10);
    let stream = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail(format!(
                "rendezvous at {target} did not answer by the start-up deadline (rank 0 not \
                 started, or on another host: set WEFT_RENDEZVOUS)"
            )));
        }
        match TcpStream::connect_timeout(&target, left.min(Duration::from_secs(5))) {
            Ok(s) => break s,
            Err(_) => {
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    };
    let nonce = hex(
        &crate::wire::handshake::random32().map_err(|e| fail(format!("rendezvous: {e}")))?[..16]
    );
    let addr = mine.to_string();
    let tag = register_tag(key, job, rank, &addr, &nonce);
    let mut w = stream.try_clone().map_err(|e| fail(e.to_string()))?;
    writeln!(w, "{PROTOCOL} register {rank} {addr} {nonce} {tag}")
        .map_err(|e| fail(format!("rendezvous at {target}: {e}")))?;
    let left = deadline.saturating_duration_since(Instant::now());
    let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(1))));
    let line = read_line(&mut BufReader::new(stream))
        .map_err(|e| fail(format!("rendezvous at {target}: no list ({e})")))?;
    let w: Vec<&str> = line.split(' ').collect();
    match w[..] {
        [PROTOCOL, "peers", list, extra, tag] => {
            if !same(tag, &peers_tag(key, job, &nonce, list, extra)) {
                return Err(fail(format!(
                    "rendezvous at {target}: the list's tag does not check (another job's key?)"
                )));
            }
            let extra = (extra != "-").then(|| extra.to_string());
            Ok((PeerList::parse(list, "the rendezvous's list")?, extra))
        }
        [PROTOCOL, "error", ..] => Err(fail(format!("rendezvous at {target} refused: {line}"))),
        _ => Err(fail(format!("rendezvous at {target}: unexpected {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 0 and three others, the others started first: one list, everyone in it, and a
    /// registration under another key is refused while the real ones go through.
    #[test]
    fn ranks_started_in_any_order_get_one_list() {
        let key = JobKey::from_bytes([3; 32]);
        let job = "test-job";
        let listener = listen(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = |r: u16| -> SocketAddr { ([127, 0, 0, 1], 7000 + r).into() };
        let rank0 = {
            let key = key.clone();
            std::thread::spawn(move || {
                serve(listener, &key, job, 4, addr(0), Some("x:1"), deadline)
            })
        };
        // A process with another key is refused, and the rendezvous waits on.
        let refused = join(
            "127.0.0.1",
            port,
            &JobKey::from_bytes([9; 32]),
            job,
            2,
            addr(99),
            deadline,
        )
        .unwrap_err()
        .to_string();
        assert!(refused.contains("does not check"), "{refused}");
        let others: Vec<_> = (1..4u32)
            .map(|r| {
                let key = key.clone();
                std::thread::spawn(move || {
                    join("127.0.0.1", port, &key, job, r, addr(r as u16), deadline)
                })
            })
            .collect();
        let list = rank0.join().unwrap().unwrap();
        for (r, t) in others.into_iter().enumerate() {
            let (got, extra) = t.join().unwrap().unwrap();
            assert_eq!(got, list, "rank {}", r + 1);
            assert_eq!(extra.as_deref(), Some("x:1"));
        }
        let ids: Vec<NodeId> = (0..4).map(NodeId).collect();
        list.check_covers(&ids, NodeId(0), "list").unwrap();
        assert_eq!(list.without(NodeId(9)).get(&NodeId(2)), Some(&addr(2)));
    }

    #[test]
    fn a_rank_that_never_comes_is_named() {
        let key = JobKey::from_bytes([3; 32]);
        let listener = listen(0).unwrap();
        let deadline = Instant::now() + Duration::from_millis(300);
        let e = serve(
            listener,
            &key,
            "j",
            3,
            ([127, 0, 0, 1], 1).into(),
            None,
            deadline,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[1, 2]"), "{e}");
    }
}
