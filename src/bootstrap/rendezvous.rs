//! Rank 0's rendezvous: where a job's processes trade addresses when the launcher offers no
//! key-value space (Slurm, Open MPI, the env launcher). Rank 0 listens on a port every process
//! computes from the job's id; each other rank registers its address; once all have, rank 0
//! answers each with the whole list. Both directions are tagged with the job key, bound to the
//! job id and, for the answer, to the registration's fresh nonce: a process outside the job can
//! neither register nor hand out a list, and a recorded answer is no answer to a new
//! registration.
//!
//! ```text
//! rank r -> 0:  weft-rendezvous/2 register R SIZE PARAMS ADDR NONCE TAG
//!                                 TAG = key("register", job, R, SIZE, PARAMS, ADDR, NONCE)
//! 0 -> rank r:  weft-rendezvous/2 peers LIST EXTRA TAG         TAG = key("peers", job, NONCE, LIST, EXTRA)
//! 0 -> anyone:  weft-rendezvous/2 error WHY                    (untagged, informational)
//! ```
//!
//! A registration that does not check is answered with an error line and closed; rank 0 waits
//! on for the real ones. One that checks but says another job size or other parameters (a
//! rank given another `WEFT_SIZE`, `--radix`, `--mode`) ends the rendezvous: every rank that
//! registered is told which rank differs and how, and rank 0 fails with the same words. A rank
//! that registers again (a process restarted during start-up) replaces its earlier
//! registration, which is told so. Everything is bounded by the start-up deadline: a rank
//! that never comes is an error naming the missing ranks.
//!
//! The port comes from the job id ([`super::launch::rendezvous_ports`]): rank 0 listens on
//! the first of its ports that is free, and the others look for it on each in turn, passing
//! over a rendezvous whose tag says it is another job's.

use super::{BootstrapError, PeerList};
use crate::wire::handshake::JobKey;
use crate::NodeId;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The protocol's first word.
const PROTOCOL: &str = "weft-rendezvous/2";

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

/// What the ranks of one job must agree on: its id, its size and the parameters its nodes run
/// with (`MembershipConfig::params`, or anything else the caller names).
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    /// The launcher's job id.
    pub id: &'a str,
    /// Processes in the job.
    pub size: u32,
    /// The parameters, as text (spaces allowed).
    pub params: &'a str,
}

impl Job<'_> {
    /// The parameters as one word of the line.
    fn params_word(&self) -> String {
        if self.params.is_empty() {
            "-".into()
        } else {
            self.params.replace(' ', "+")
        }
    }
}

fn register_tag(key: &JobKey, job: &Job, rank: u32, addr: &str, nonce: &str) -> String {
    let (r, size, params) = (rank.to_string(), job.size.to_string(), job.params_word());
    hex(&key.tag(
        b"register",
        &[
            job.id.as_bytes(),
            r.as_bytes(),
            size.as_bytes(),
            params.as_bytes(),
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

/// Why a registration is not taken.
enum Unfit {
    /// Not of this job (or not a registration): answered, and the rendezvous waits on.
    Stranger(String),
    /// Of this job, but the rank disagrees about it: the job cannot form.
    Disagrees(String),
}

/// The text shown for a word of the line (bounded: a stranger's line may be anything).
fn shown(w: &str) -> String {
    let head: String = w.chars().take(80).collect();
    head.replace('+', " ")
}

/// A checked registration: rank, address, nonce.
fn parse_register(line: &str, key: &JobKey, job: &Job) -> Result<(u32, SocketAddr, String), Unfit> {
    let w: Vec<&str> = line.split(' ').collect();
    let [proto, "register", rank, size, params, addr, nonce, tag] = w[..] else {
        return Err(Unfit::Stranger(format!(
            "not a registration: {:?}",
            shown(line)
        )));
    };
    if proto != PROTOCOL {
        return Err(Unfit::Stranger(format!(
            "protocol {:?}, expected {PROTOCOL}",
            shown(proto)
        )));
    }
    let theirs = Job {
        id: job.id,
        size: size.parse().unwrap_or(u32::MAX),
        params: &if params == "-" {
            String::new()
        } else {
            params.replace('+', " ")
        },
    };
    let r: u32 = rank.parse().unwrap_or(u32::MAX);
    if !same(tag, &register_tag(key, &theirs, r, addr, nonce)) {
        return Err(Unfit::Stranger(
            "the registration's tag does not check (another job, or no key)".into(),
        ));
    }
    if theirs.size != job.size {
        return Err(Unfit::Disagrees(format!(
            "rank {r} says the job has {} processes, rank 0 says {} (a different WEFT_SIZE or \
             launcher size?)",
            shown(size),
            job.size
        )));
    }
    if theirs.params != job.params {
        return Err(Unfit::Disagrees(format!(
            "rank {r} runs {:?}, rank 0 runs {:?}: every rank must be given the same options",
            theirs.params, job.params
        )));
    }
    if r == 0 || r >= job.size {
        return Err(Unfit::Stranger(format!(
            "rank {r} is not in 1..{}",
            job.size
        )));
    }
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| Unfit::Stranger(format!("address {:?}", shown(addr))))?;
    Ok((r, addr, nonce.to_string()))
}

/// Rank 0: serve the rendezvous on `listener` until every rank of `size` has registered, and
/// give each the whole list (with `mine`, rank 0's own address) and `extra` (one word, for
/// whatever else the job needs from rank 0). The list.
pub fn serve(
    listener: TcpListener,
    key: &JobKey,
    job: &Job,
    mine: SocketAddr,
    extra: Option<&str>,
    deadline: Instant,
) -> Result<PeerList, BootstrapError> {
    let size = job.size;
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
            match parse_register(&line, key, job) {
                Ok((rank, addr, nonce)) => {
                    let again = registered.insert(rank, (addr, nonce, stream));
                    if let Some((before, _, mut old)) = again {
                        let _ = writeln!(
                            old,
                            "{PROTOCOL} error rank {rank} registered again, from {addr} (this \
                             registration came from {before}): two processes for one rank?"
                        );
                    }
                }
                Err(Unfit::Stranger(why)) => {
                    let _ = writeln!(stream, "{PROTOCOL} error {why}");
                }
                Err(Unfit::Disagrees(why)) => {
                    // The job cannot form: every rank that came hears why, as rank 0 does.
                    let _ = writeln!(stream, "{PROTOCOL} error {why}");
                    for (_, (_, _, mut s)) in registered.drain() {
                        let _ = writeln!(s, "{PROTOCOL} error {why}");
                    }
                    return Err(fail(format!("rendezvous: {why}")));
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
        let tag = peers_tag(key, job.id, &nonce, &line, &extra);
        let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
        let _ = writeln!(stream, "{PROTOCOL} peers {line} {extra} {tag}");
    }
    Ok(list)
}

/// Bind rank 0's rendezvous on the first of `ports` that is free, on every interface.
pub fn listen_first(ports: &[u16]) -> Result<TcpListener, BootstrapError> {
    let mut last = None;
    for &port in ports {
        match listen(port) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| fail("rendezvous: no port to listen on")))
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

/// Rank `rank` (not 0): register `mine` at the rendezvous on `host`, on the first of `ports`
/// where this job's rank 0 answers, trying again while nothing listens (rank 0 may start
/// later), and read the job's list and rank 0's extra word. A rendezvous that says the
/// registration's tag does not check is another job's (two job ids can hash to one port): the
/// next port is tried.
pub fn join(
    host: &str,
    ports: &[u16],
    key: &JobKey,
    job: &Job,
    rank: u32,
    mine: SocketAddr,
    deadline: Instant,
) -> Result<(PeerList, Option<String>), BootstrapError> {
    let ip = (host, 0)
        .to_socket_addrs()
        .map_err(|e| fail(format!("rendezvous host {host:?}: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("rendezvous host {host:?} has no address")))?
        .ip();
    let mut pause = Duration::from_millis(10);
    // Ports whose rendezvous is another job's, and what the last of them said.
    let mut foreign: Vec<u16> = Vec::new();
    let mut last_refusal = None;
    loop {
        let mut reached = false;
        let open: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|p| !foreign.contains(p))
            .collect();
        for port in open {
            let target = SocketAddr::new(ip, port);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Ok(stream) = TcpStream::connect_timeout(&target, left.min(Duration::from_secs(5)))
            else {
                continue;
            };
            reached = true;
            match register(stream, target, key, job, rank, mine, deadline)? {
                Answer::List(list, extra) => return Ok((list, extra)),
                Answer::Foreign(why) => {
                    foreign.push(port);
                    last_refusal = Some(format!("{target}: {why}"));
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || foreign.len() == ports.len() {
            let tried: Vec<String> = ports.iter().map(u16::to_string).collect();
            return Err(fail(match last_refusal {
                Some(r) if foreign.len() == ports.len() => format!(
                    "no rendezvous of this job on {host} ports {}: each belongs to another job \
                     or holds another key (last: {r})",
                    tried.join(",")
                ),
                _ => format!(
                    "rendezvous on {host} ports {} did not answer by the start-up deadline \
                     (rank 0 not started, or on another host: set WEFT_RENDEZVOUS)",
                    tried.join(",")
                ),
            }));
        }
        if !reached {
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }
}

/// What a rendezvous answered a registration.
enum Answer {
    /// The job's list and rank 0's extra word.
    List(PeerList, Option<String>),
    /// Not this job's rendezvous (its tag does not check): why.
    Foreign(String),
}

/// Register at the rendezvous `stream` reached and read its answer.
fn register(
    stream: TcpStream,
    target: SocketAddr,
    key: &JobKey,
    job: &Job,
    rank: u32,
    mine: SocketAddr,
    deadline: Instant,
) -> Result<Answer, BootstrapError> {
    let nonce = hex(
        &crate::wire::handshake::random32().map_err(|e| fail(format!("rendezvous: {e}")))?[..16]
    );
    let addr = mine.to_string();
    let tag = register_tag(key, job, rank, &addr, &nonce);
    let mut w = stream.try_clone().map_err(|e| fail(e.to_string()))?;
    let (size, params) = (job.size, job.params_word());
    writeln!(
        w,
        "{PROTOCOL} register {rank} {size} {params} {addr} {nonce} {tag}"
    )
    .map_err(|e| fail(format!("rendezvous at {target}: {e}")))?;
    let left = deadline.saturating_duration_since(Instant::now());
    let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(1))));
    let line = read_line(&mut BufReader::new(stream)).map_err(|e| {
        fail(format!(
            "rendezvous at {target}: no list ({e}): rank 0 went away before every rank came"
        ))
    })?;
    let w: Vec<&str> = line.split(' ').collect();
    match w[..] {
        [PROTOCOL, "peers", list, extra, tag] => {
            if !same(tag, &peers_tag(key, job.id, &nonce, list, extra)) {
                return Err(fail(format!(
                    "rendezvous at {target}: the list's tag does not check (another job's key?)"
                )));
            }
            let extra = (extra != "-").then(|| extra.to_string());
            Ok(Answer::List(
                PeerList::parse(list, "the rendezvous's list")?,
                extra,
            ))
        }
        [PROTOCOL, "error", ..] if line.contains("tag does not check") => {
            Ok(Answer::Foreign(shown(&line)))
        }
        [p, "error", ..] if p.starts_with("weft-rendezvous/") && p != PROTOCOL => {
            Ok(Answer::Foreign(format!("{p}: another weft version")))
        }
        [PROTOCOL, "error", ..] => Err(fail(format!(
            "rendezvous at {target} refused: {}",
            line.split_once(" error ").map_or(&line[..], |(_, w)| w)
        ))),
        _ => Err(fail(format!(
            "rendezvous at {target}: unexpected {:?}",
            shown(&line)
        ))),
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
        let job = Job {
            id: "test-job",
            size: 4,
            params: "membership nodes=4 radix=4",
        };
        let listener = listen(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = |r: u16| -> SocketAddr { ([127, 0, 0, 1], 7000 + r).into() };
        let rank0 = {
            let key = key.clone();
            std::thread::spawn(move || serve(listener, &key, &job, addr(0), Some("x:1"), deadline))
        };
        // A process with another key is refused, and the rendezvous waits on.
        let refused = join(
            "127.0.0.1",
            &[port],
            &JobKey::from_bytes([9; 32]),
            &job,
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
                    join(
                        "127.0.0.1",
                        &[port],
                        &key,
                        &job,
                        r,
                        addr(r as u16),
                        deadline,
                    )
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
        let job = Job {
            id: "j",
            size: 3,
            params: "",
        };
        let e = serve(
            listener,
            &key,
            &job,
            ([127, 0, 0, 1], 1).into(),
            None,
            deadline,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[1, 2]"), "{e}");
    }

    /// A rank told another job size, or run with other parameters, ends the rendezvous at
    /// every rank with the same words, naming it; a rank that registers twice tells the first
    /// registration so.
    #[test]
    fn ranks_that_disagree_about_the_job_are_named_at_every_rank() {
        let key = JobKey::from_bytes([4; 32]);
        let addr = |r: u16| -> SocketAddr { ([127, 0, 0, 1], 7100 + r).into() };
        for (theirs_size, theirs_params, what) in [
            (
                4u32,
                "radix=4 mode=patch",
                "rank 2 says the job has 4 processes, rank 0 says 3",
            ),
            (
                3,
                "radix=2 mode=rebalance",
                "rank 2 runs \"radix=2 mode=rebalance\"",
            ),
        ] {
            let job = Job {
                id: "j2",
                size: 3,
                params: "radix=4 mode=patch",
            };
            let listener = listen(0).unwrap();
            let port = listener.local_addr().unwrap().port();
            let deadline = Instant::now() + Duration::from_secs(20);
            let rank0 = {
                let key = key.clone();
                std::thread::spawn(move || serve(listener, &key, &job, addr(0), None, deadline))
            };
            let good = {
                let key = key.clone();
                std::thread::spawn(move || {
                    join("127.0.0.1", &[port], &key, &job, 1, addr(1), deadline)
                })
            };
            let odd = Job {
                id: "j2",
                size: theirs_size,
                params: theirs_params,
            };
            let e2 = join("127.0.0.1", &[port], &key, &odd, 2, addr(2), deadline).unwrap_err();
            let e0 = rank0.join().unwrap().unwrap_err();
            // Rank 1 is told why if its registration was in before the odd one; else rank 0
            // has gone when it is read.
            let e1 = good.join().unwrap().unwrap_err().to_string();
            for e in [&e0, &e2] {
                assert!(e.to_string().contains(what), "{e}");
            }
            assert!(e1.contains(what) || e1.contains("went away"), "{e1}");
        }
        // Two processes for rank 1 of three: the one registered first is told when the other
        // replaces it; rank 2 comes after that, and the replacing one gets the list.
        let job = Job {
            id: "j3",
            size: 3,
            params: "",
        };
        let listener = listen(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(20);
        let rank0 = {
            let key = key.clone();
            std::thread::spawn(move || serve(listener, &key, &job, addr(0), None, deadline))
        };
        let (tx, rx) = mpsc::channel();
        for a in [addr(1), addr(5)] {
            let (key, tx) = (key.clone(), tx.clone());
            std::thread::spawn(move || {
                let _ = tx.send(join("127.0.0.1", &[port], &key, &job, 1, a, deadline));
            });
        }
        let told = rx.recv().unwrap().unwrap_err().to_string();
        assert!(told.contains("rank 1 registered again"), "{told}");
        let (list, _) = join("127.0.0.1", &[port], &key, &job, 2, addr(2), deadline).unwrap();
        let (got, _) = rx.recv().unwrap().unwrap();
        assert_eq!(got, list);
        assert_eq!(rank0.join().unwrap().unwrap(), list);
    }

    /// Two jobs whose ids hash to one port, started together on one host: the second's rank 0
    /// listens on its next port, and its other ranks pass over the first job's rendezvous.
    #[test]
    fn two_jobs_on_one_port_each_find_their_own_rendezvous() {
        let key = JobKey::from_bytes([5; 32]);
        let addr = |r: u16| -> SocketAddr { ([127, 0, 0, 1], 7200 + r).into() };
        // Ports the test holds as the first job's: its rendezvous on the first, waiting.
        let first = listen(0).unwrap();
        let p1 = first.local_addr().unwrap().port();
        let spare = TcpListener::bind("127.0.0.1:0").unwrap();
        let p2 = spare.local_addr().unwrap().port();
        drop(spare);
        let deadline = Instant::now() + Duration::from_secs(20);
        let job_a = Job {
            id: "job-a",
            size: 2,
            params: "",
        };
        let a0 = {
            let key = key.clone();
            std::thread::spawn(move || serve(first, &key, &job_a, addr(0), None, deadline))
        };
        let job_b = Job {
            id: "job-b",
            size: 2,
            params: "",
        };
        let b0 = {
            let key = key.clone();
            std::thread::spawn(move || {
                let l = listen_first(&[p1, p2]).unwrap();
                assert_eq!(l.local_addr().unwrap().port(), p2);
                serve(l, &key, &job_b, addr(10), None, deadline)
            })
        };
        let (list, _) = join("127.0.0.1", &[p1, p2], &key, &job_b, 1, addr(11), deadline).unwrap();
        assert_eq!(list.get(NodeId(0)), Some(addr(10)));
        assert!(b0.join().unwrap().is_ok());
        let (list, _) = join("127.0.0.1", &[p1, p2], &key, &job_a, 1, addr(1), deadline).unwrap();
        assert_eq!(list.get(NodeId(0)), Some(addr(0)));
        assert!(a0.join().unwrap().is_ok());
    }
}
