//! From a launch to the job's address book: the key every process uses, and where each one
//! listens. Each process binds its listener first and exchanges afterwards, so by the time
//! any process holds the list, everyone on it is listening.
//!
//! The job key: `WEFT_JOB_KEY` (64 hex digits) if set; else one derived from a secret and the
//! launcher's job id ([`JobKey::derive`]: one secret, a key per job). Under PMI-1, with
//! neither variable set, rank 0 puts a fresh key into the job's key-value space, which only
//! the job's processes can read. Elsewhere the secret is `WEFT_JOB_SECRET`, else the user's
//! secret file (`WEFT_SECRET_FILE`, default `~/.weft/secret`, created on first use, mode
//! 0600, like an SSH key): on a cluster with shared home directories every rank reads the
//! same one, and no other user can.

use super::launch::{Env, Exchange, Launch};
use super::{pmi, rendezvous, BootstrapError, PeerList};
use crate::wire::handshake::JobKey;
use crate::NodeId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Instant;

/// A process's place in a job that has traded its addresses.
#[derive(Debug)]
pub struct Joined {
    /// Its rank, the job's size, the launcher.
    pub launch: Launch,
    /// The job key.
    pub key: JobKey,
    /// Where every process of the job listens (itself included).
    pub peers: PeerList,
    /// What rank 0 handed out beside the list (see [`exchange`]'s `extra`).
    pub extra: Option<String>,
}

/// The job key the environment gives for `job`, if any (`WEFT_JOB_KEY`, `WEFT_JOB_SECRET`).
pub fn key_from_env(env: &dyn Env, job: &str) -> Result<Option<JobKey>, BootstrapError> {
    if let Some(hex) = env.var("WEFT_JOB_KEY") {
        return JobKey::from_hex(&hex)
            .map(Some)
            .map_err(|e| BootstrapError::Launcher {
                variable: "WEFT_JOB_KEY".into(),
                why: e.to_string(),
            });
    }
    Ok(env
        .var("WEFT_JOB_SECRET")
        .filter(|s| !s.is_empty())
        .map(|s| JobKey::derive(s.as_bytes(), job)))
}

/// The user's secret file: `WEFT_SECRET_FILE`, else `$HOME/.weft/secret`.
fn secret_path(env: &dyn Env) -> Option<std::path::PathBuf> {
    env.var("WEFT_SECRET_FILE").map(Into::into).or_else(|| {
        env.var("HOME")
            .map(|h| std::path::Path::new(&h).join(".weft/secret"))
    })
}

/// The user's secret, created on first use: 32 random bytes as hex, mode 0600. Processes
/// starting at once race to create it; each writes a file of its own and links it into
/// place, which fails for all but one, so every reader sees a whole secret.
pub fn user_secret(env: &dyn Env) -> Result<Vec<u8>, BootstrapError> {
    use std::os::unix::fs::OpenOptionsExt;
    let bad = |why: String| BootstrapError::Launcher {
        variable: "WEFT_SECRET_FILE".into(),
        why,
    };
    let path = secret_path(env).ok_or_else(|| bad("not set, and no HOME".into()))?;
    // As ssh does with a private key: a secret others can read is no secret, and every job
    // key derived from it could be forged.
    let private = |p: &std::path::Path| -> Result<(), BootstrapError> {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(p) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => Err(bad(format!(
                "{}: readable by others (mode {:04o}); chmod 600 {} or remove it",
                p.display(),
                m.permissions().mode() & 0o7777,
                p.display()
            ))),
            _ => Ok(()),
        }
    };
    let read = |p: &std::path::Path| -> Option<Vec<u8>> {
        let s = std::fs::read(p).ok()?;
        (s.len() >= 32 && s.len() <= 1024).then_some(s)
    };
    if let Some(s) = read(&path) {
        private(&path)?;
        return Ok(s);
    }
    let dir = path
        .parent()
        .ok_or_else(|| bad(format!("{}: no directory", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("{}: {e}", dir.display())))?;
    let fresh = JobKey::generate().map_err(|e| bad(e.to_string()))?.to_hex();
    let tmp = dir.join(format!(".secret.{}.{}", std::process::id(), &fresh[..16]));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, fresh.as_bytes()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(bad(format!("{}: {e}", tmp.display())));
    }
    let _ = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    private(&path)?;
    read(&path).ok_or_else(|| {
        bad(format!(
            "{}: not a secret (32 to 1024 bytes)",
            path.display()
        ))
    })
}

/// The address the other processes should dial for a listener bound to `listen`: `listen`
/// itself unless it is the wildcard; else `WEFT_ADVERTISE` (an IP), else the local address of
/// the route to the rendezvous host, else this host's name's first non-loopback IPv4, else
/// 127.0.0.1 (one host).
pub fn advertised(
    listen: SocketAddr,
    launch: &Launch,
    env: &dyn Env,
) -> Result<SocketAddr, BootstrapError> {
    if !listen.ip().is_unspecified() {
        return Ok(listen);
    }
    let port = listen.port();
    if let Some(v) = env.var("WEFT_ADVERTISE") {
        let ip: IpAddr = v.trim().parse().map_err(|_| BootstrapError::Launcher {
            variable: "WEFT_ADVERTISE".into(),
            why: format!("{v:?} is not an IP address"),
        })?;
        return Ok(SocketAddr::new(ip, port));
    }
    let routed = match &launch.exchange {
        Exchange::Rendezvous { host, port } => (host.as_str(), *port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.find(SocketAddr::is_ipv4))
            .and_then(|target| {
                let s = UdpSocket::bind("0.0.0.0:0").ok()?;
                s.connect(target).ok()?;
                s.local_addr().ok().map(|a| a.ip())
            }),
        Exchange::Pmi { .. } => None,
    };
    let named = || {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
        if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0)?;
        let name = std::str::from_utf8(&buf[..end]).ok()?;
        (name, 0)
            .to_socket_addrs()
            .ok()?
            .map(|a| a.ip())
            .find(|ip| ip.is_ipv4() && !ip.is_loopback())
    };
    // A host with no interface but loopback reaches no other host: loopback is then right.
    // Whether a loopback address was advertised to a job that spans hosts is checked once
    // the addresses are traded (`check_loopback`).
    let ip = routed
        .or_else(named)
        .or_else(interface_ipv4)
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    Ok(SocketAddr::new(ip, port))
}

/// The first IPv4 address of an interface that is up and not loopback.
fn interface_ipv4() -> Option<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list it allocates, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if ifa.ifa_addr.is_null() || !up || lo {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))));
            break;
        }
    }
    // SAFETY: the list came from getifaddrs and is not used after this.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// This process's host as far as a loopback address reaches: the boot and the network
/// namespace (processes in two namespaces of one machine do not share a loopback).
pub fn loopback_scope() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{}/{netns}", boot.trim())
}

/// A loopback address reaches only processes of the same [`loopback_scope`]: `scopes` are the
/// ranks' scopes in rank order, `peers` their addresses. An error naming the first rank that
/// advertised loopback to a rank of another scope, and `WEFT_ADVERTISE`.
fn check_loopback(peers: &PeerList, scopes: &[String]) -> Result<(), BootstrapError> {
    let first = scopes.first();
    if scopes.iter().all(|s| Some(s) == first) {
        return Ok(());
    }
    for (r, _) in scopes.iter().enumerate() {
        if let Some(a) = peers.get(NodeId(r as u64)).filter(|a| a.ip().is_loopback()) {
            return Err(BootstrapError::Launcher {
                variable: "WEFT_ADVERTISE".into(),
                why: format!(
                    "rank {r} advertises {a}, a loopback address, to a job whose ranks are on \
                     several hosts (or network namespaces); give each rank a reachable \
                     address in WEFT_ADVERTISE"
                ),
            });
        }
    }
    Ok(())
}

/// Trade addresses with the rest of the job: `mine` is where this process listens (already
/// bound). `key`: the job key if the caller has one (a key file); else the environment's,
/// else, under PMI-1, rank 0's fresh one. `extra`: on rank 0, one word to hand every process
/// (an experiment's control address); on the others, `Some` (of anything) asks for rank 0's
/// word. `params`: what every rank must run alike (the membership's parameters): a rank that
/// differs, or that says another job size, fails the exchange at every rank, named. Bounded
/// by `deadline`.
pub fn exchange(
    mut launch: Launch,
    mine: SocketAddr,
    key: Option<JobKey>,
    extra: Option<&str>,
    params: &str,
    env: &dyn Env,
    deadline: Instant,
) -> Result<Joined, BootstrapError> {
    let (key, peers, extra) = match launch.exchange.clone() {
        Exchange::Pmi { fd } => {
            let stream = pmi_stream(fd, deadline)?;
            let within = deadline.saturating_duration_since(Instant::now());
            let mut p = pmi::Pmi::init(stream, within)?;
            launch.job = format!("pmi-{}", p.kvsname());
            let mut key = match key {
                Some(k) => Some(k),
                None => key_from_env(env, &launch.job)?,
            };
            if key.is_none() && launch.rank == 0 {
                let k = JobKey::generate().map_err(|e| BootstrapError::Exchange(e.to_string()))?;
                p.put("weft-key", &k.to_hex())?;
                key = Some(k);
            }
            p.put(&format!("weft-addr-{}", launch.rank), &mine.to_string())?;
            let params_word = if params.is_empty() {
                "-".to_string()
            } else {
                params.replace(' ', "+")
            };
            p.put(&format!("weft-params-{}", launch.rank), &params_word)?;
            if mine.ip().is_loopback() {
                p.put(&format!("weft-lo-{}", launch.rank), &loopback_scope())?;
            }
            if let (0, Some(e)) = (launch.rank, extra) {
                p.put("weft-extra", e)?;
            }
            p.barrier()?;
            let key = match key {
                Some(k) => k,
                None => JobKey::from_hex(&p.get("weft-key")?)
                    .map_err(|e| BootstrapError::Exchange(format!("PMI weft-key: {e}")))?,
            };
            let mut line = Vec::new();
            for r in 0..launch.size {
                line.push(format!("{r}={}", p.get(&format!("weft-addr-{r}"))?));
            }
            let extra = match extra {
                Some(_) => Some(p.get("weft-extra")?),
                None => None,
            };
            // Every rank runs what rank 0 runs, or the job cannot form: named at every rank.
            for r in 0..launch.size {
                let theirs = p.get(&format!("weft-params-{r}"))?;
                if theirs != params_word {
                    return Err(BootstrapError::Exchange(format!(
                        "rank {r} runs {:?}, rank {} runs {:?}: every rank must be given the \
                         same options",
                        theirs.replace('+', " "),
                        launch.rank,
                        params
                    )));
                }
            }
            let peers = PeerList::parse(&line.join(","), "the PMI key-value space")?;
            if peers.iter().any(|(_, a)| a.ip().is_loopback()) {
                // Every rank's scope: a rank that advertised an address that is not loopback
                // has none, and one of its own is looked at instead (an empty one differs).
                let mut scopes = Vec::new();
                for r in 0..launch.size {
                    let id = NodeId(u64::from(r));
                    let lo = peers.get(id).is_some_and(|a| a.ip().is_loopback());
                    scopes.push(if lo {
                        p.get(&format!("weft-lo-{r}"))?
                    } else {
                        format!("not loopback: rank {r}")
                    });
                }
                check_loopback(&peers, &scopes)?;
            }
            p.finalize()?;
            (key, peers, extra)
        }
        Exchange::Rendezvous { host, port } => {
            let key = match key {
                Some(k) => k,
                None => match key_from_env(env, &launch.job)? {
                    Some(k) => k,
                    None => JobKey::derive(&user_secret(env)?, &launch.job),
                },
            };
            // A port of the formula has spares (two jobs may hash to one); one given by
            // WEFT_RENDEZVOUS is the only one.
            let ports = if port == super::launch::rendezvous_port(&launch.job) {
                super::launch::rendezvous_ports(&launch.job)
            } else {
                vec![port]
            };
            let job = rendezvous::Job {
                id: &launch.job,
                size: launch.size,
                params,
            };
            let (peers, extra) = if launch.rank == 0 {
                let listener = rendezvous::listen_first(&ports)?;
                let peers = rendezvous::serve(listener, &key, &job, mine, extra, deadline)?;
                (peers, extra.map(str::to_string))
            } else {
                rendezvous::join(&host, &ports, &key, &job, launch.rank, mine, deadline)?
            };
            (key, peers, extra)
        }
    };
    let members: Vec<NodeId> = (0..u64::from(launch.size)).map(NodeId).collect();
    peers.check_covers(
        &members,
        NodeId(u64::from(launch.rank)),
        "the exchanged list",
    )?;
    Ok(Joined {
        launch,
        key,
        peers,
        extra,
    })
}

/// The `PMI_FD` socket, with reads bounded by `deadline` (a process manager that never
/// answers is an error, not a hang).
fn pmi_stream(fd: i32, deadline: Instant) -> Result<std::fs::File, BootstrapError> {
    use std::os::fd::FromRawFd;
    let left = deadline.saturating_duration_since(Instant::now());
    let tv = libc::timeval {
        tv_sec: left.as_secs() as libc::time_t,
        tv_usec: left.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a timeval of the right size for SO_RCVTIMEO, valid for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(BootstrapError::Launcher {
            variable: "PMI_FD".into(),
            why: format!(
                "fd {fd} is not a socket: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    // SAFETY: the launcher handed this process the descriptor for PMI; nothing else in the
    // process uses it, and the File owns (and closes) it from here.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    /// Processes that start at once all read one whole secret, which only its user can read.
    #[test]
    fn the_user_secret_is_made_once_whoever_comes_first() {
        let dir = std::env::temp_dir().join(format!("weft-secret-test-{}", std::process::id()));
        let path = dir.join("sub/secret");
        let env: HashMap<String, String> =
            HashMap::from([("WEFT_SECRET_FILE".into(), path.display().to_string())]);
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let t: Vec<_> = (0..8)
                .map(|_| s.spawn(|| user_secret(&env).unwrap()))
                .collect();
            t.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(got.iter().all(|g| *g == got[0] && g.len() == 64));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Keys derived from it differ per job.
        assert_ne!(
            JobKey::derive(&got[0], "a").to_hex(),
            JobKey::derive(&got[0], "b").to_hex()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two ranks in two network namespaces, each advertising 127.0.0.1 into one key-value
    /// space, each reached only itself and formed a view of one: a loopback address traded
    /// between scopes is refused, naming the rank and WEFT_ADVERTISE.
    #[test]
    fn loopback_addresses_are_refused_across_hosts_and_kept_on_one() {
        let peers = PeerList::parse("0=127.0.0.1:7000,1=127.0.0.1:7001", "test").unwrap();
        let one = vec!["boot/net:[1]".to_string(); 2];
        assert!(check_loopback(&peers, &one).is_ok());
        let two = vec!["boot/net:[1]".to_string(), "boot/net:[2]".to_string()];
        let err = check_loopback(&peers, &two).unwrap_err().to_string();
        assert!(
            err.contains("WEFT_ADVERTISE") && err.contains("rank 0"),
            "{err}"
        );
        // An address that is not loopback, beside one that is, is a job on several hosts.
        let mixed = PeerList::parse("0=10.0.0.1:7000,1=127.0.0.1:7001", "test").unwrap();
        let scopes = vec![
            "not loopback: rank 0".to_string(),
            "boot/net:[1]".to_string(),
        ];
        let err = check_loopback(&mixed, &scopes).unwrap_err().to_string();
        assert!(err.contains("rank 1 advertises 127.0.0.1:7001"), "{err}");
        assert!(!loopback_scope().is_empty());
    }

    /// A secret file others can read is refused, naming the file and its mode.
    #[test]
    fn a_secret_readable_by_others_is_refused() {
        let dir = std::env::temp_dir().join(format!("weft-secret-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        std::fs::write(&path, [7u8; 64]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let env: HashMap<String, String> =
            HashMap::from([("WEFT_SECRET_FILE".into(), path.display().to_string())]);
        let err = user_secret(&env).unwrap_err().to_string();
        assert!(err.contains("readable by others (mode 0644)"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(user_secret(&env).unwrap(), vec![7u8; 64]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
