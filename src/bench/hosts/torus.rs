//! The hosts of a [`Cluster`] wired as a 3-D torus (ICS'06 §6, BlueGene/L's network): each
//! host is linked by a veth pair to each of its torus neighbours, every dimension wraps
//! around, every host forwards, and routes are dimension-ordered (x, then y, then z, each the
//! shorter way round, ties going up), so a message between hosts `a` and `b` crosses exactly
//! [`Torus::hops`]`(a, b)` links, each hop a real kernel forwarding step. Host `i` sits at
//! [`Torus::coord`]`(i)`, the XYZ order of a BG/L partition.
//!
//! Inside host `i`'s namespace the links are `xp`, `xm`, `yp`, `ym`, `zp`, `zm` (toward `+1`
//! and `-1` along each axis). An axis of extent 2 has one link (its `+1` and `-1` neighbour
//! are one host), an axis of extent 1 none. The links carry no address of their own: the
//! host's address is on `lo`, and each route names its next hop `onlink`.
//!
//! [`probe_hops`] measures what the routes do: one datagram between every ordered pair, its
//! arriving TTL counting the forwarding steps it took.

use super::netns::{Cluster, NetnsError};
use crate::topology::torus::{Coord, Torus};
use crate::Rank;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// One direction along one axis, and its link's name inside a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    /// 0, 1, 2 for x, y, z.
    pub axis: usize,
    /// Toward `+1` (true) or `-1`.
    pub up: bool,
}

impl Port {
    /// The link's device name inside the host (`xp`, `zm`, …).
    pub fn dev(self) -> &'static str {
        ["xm", "xp", "ym", "yp", "zm", "zp"][self.axis * 2 + usize::from(self.up)]
    }

    /// The same link seen from the other end.
    fn back(self) -> Port {
        Port {
            axis: self.axis,
            up: !self.up,
        }
    }
}

/// The host one step from `host` through `port`.
fn step(t: &Torus, host: u32, port: Port) -> u32 {
    let mut c = t.coord(Rank(host));
    let n = t.dims[port.axis];
    let x = &mut c.xyz[port.axis];
    *x = if port.up {
        (*x + 1) % n
    } else {
        (*x + n - 1) % n
    };
    t.rank(c).0
}

/// The ports host `host` has: both ways along an axis longer than 2; along an axis of 2 only
/// the way that does not wrap (up from 0, down from 1), since both reach one neighbour.
pub fn ports(t: &Torus, host: u32) -> Vec<Port> {
    let c = t.coord(Rank(host));
    let mut out = Vec::with_capacity(6);
    for axis in 0..3 {
        match t.dims[axis] {
            1 => {}
            2 => out.push(Port {
                axis,
                up: c.xyz[axis] == 0,
            }),
            _ => out.extend([false, true].map(|up| Port { axis, up })),
        }
    }
    out
}

/// Every link once: `(a, port at a, b)` with the port's other end at `b`.
pub fn links(t: &Torus) -> Vec<(u32, Port, u32)> {
    let hosts = t.size() as u32;
    (0..hosts)
        .flat_map(|a| {
            ports(t, a)
                .into_iter()
                .filter(|p| p.up)
                .map(move |p| (a, p, step(t, a, p)))
        })
        .collect()
}

/// The first link of the dimension-ordered route from `from` to `to` (`None` when they are
/// one host): along the first axis on which they differ, the shorter way, up on a tie.
pub fn next_hop(t: &Torus, from: u32, to: u32) -> Option<(Port, u32)> {
    let (a, b): (Coord, Coord) = (t.coord(Rank(from)), t.coord(Rank(to)));
    let axis = (0..3).find(|&i| a.xyz[i] != b.xyz[i])?;
    let n = t.dims[axis];
    let ahead = (b.xyz[axis] + n - a.xyz[axis]) % n;
    let up = if n == 2 {
        a.xyz[axis] == 0
    } else {
        ahead <= n - ahead
    };
    let port = Port { axis, up };
    Some((port, step(t, from, port)))
}

/// Wire `cluster`'s hosts (namespaces made, nothing in them but `lo`) as the torus `t`: the
/// links, each shaped to `shape` on its way out if given, the host's address on `lo`, the
/// routes, and forwarding on.
pub(super) fn wire(cluster: &Cluster, t: &Torus, shape: Option<&str>) -> Result<(), NetnsError> {
    let hosts = t.size() as u32;
    let mut root = Vec::new();
    for (a, p, b) in links(t) {
        root.push(format!(
            "link add {} netns {} type veth peer name {} netns {}",
            p.dev(),
            cluster.ns(a),
            p.back().dev(),
            cluster.ns(b)
        ));
    }
    super::netns::batch(None, &root)?;
    for h in 0..hosts {
        cluster.in_host(h, || {
            for (path, value) in [
                ("net/ipv4/ip_forward", "1"),
                ("net/ipv4/conf/all/rp_filter", "0"),
                ("net/ipv4/conf/default/rp_filter", "0"),
            ] {
                std::fs::write(format!("/proc/sys/{path}"), value).map_err(|e| {
                    NetnsError::Command {
                        command: format!("write /proc/sys/{path} in {}", cluster.ns(h)),
                        why: e.to_string(),
                    }
                })?;
            }
            Ok(())
        })?;
        let mut lines = vec![
            "link set lo up".to_string(),
            format!("addr add {}/32 dev lo", cluster.addr(h)),
        ];
        let mut qdiscs = Vec::new();
        for p in ports(t, h) {
            lines.push(format!("link set {} up", p.dev()));
            if let Some(rate) = shape {
                qdiscs.push(format!(
                    "qdisc add dev {} root tbf rate {rate} burst 256kb latency 50ms",
                    p.dev()
                ));
            }
        }
        super::netns::batch(Some(&cluster.ns(h)), &lines)?;
        super::netns::tc_batch(&cluster.ns(h), &qdiscs)?;
        let mut routes = Vec::new();
        for to in (0..hosts).filter(|&to| to != h) {
            let (p, via) = next_hop(t, h, to).expect("two hosts differ somewhere");
            routes.push(format!(
                "route add {}/32 via {} dev {} onlink",
                cluster.addr(to),
                cluster.addr(via),
                p.dev()
            ));
        }
        super::netns::batch(Some(&cluster.ns(h)), &routes)?;
    }
    Ok(())
}

/// Host `host`'s links go down: nothing reaches it or leaves it, and it forwards nothing.
pub(super) fn down(cluster: &Cluster, t: &Torus, host: u32, up: bool) -> Result<(), NetnsError> {
    let state = if up { "up" } else { "down" };
    let lines: Vec<String> = ports(t, host)
        .into_iter()
        .map(|p| format!("link set {} {state}", p.dev()))
        .collect();
    super::netns::batch(Some(&cluster.ns(host)), &lines)
}

/// The port the probes use on every host.
const PROBE_PORT: u16 = 7999;

/// For every ordered pair of hosts, how many links a datagram from `a` to `b` crossed,
/// counted from the TTL it arrived with (sent with 64, less one per forwarding host).
pub fn probe_hops(cluster: &Cluster) -> Result<Vec<(u32, u32, u32)>, NetnsError> {
    let io = |what: &str, e: std::io::Error| NetnsError::Command {
        command: format!("the torus probe ({what})"),
        why: e.to_string(),
    };
    let hosts = cluster.hosts();
    let sockets: Vec<UdpSocket> = (0..hosts)
        .map(|h| {
            cluster.in_host(h, || {
                let s = UdpSocket::bind(SocketAddr::new(cluster.addr(h), PROBE_PORT))
                    .map_err(|e| io("bind", e))?;
                s.set_ttl(64).map_err(|e| io("IP_TTL", e))?;
                ask_ttl(&s).map_err(|e| io("IP_RECVTTL", e))?;
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .map_err(|e| io("timeout", e))?;
                Ok(s)
            })
        })
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (b, rx) in sockets.iter().enumerate() {
        for (a, tx) in sockets.iter().enumerate().filter(|&(a, _)| a != b) {
            tx.send_to(
                &(a as u32).to_le_bytes(),
                (cluster.addr(b as u32), PROBE_PORT),
            )
            .map_err(|e| io("send", e))?;
            let (from, ttl) =
                recv_with_ttl(rx).map_err(|e| io(&format!("host {b} waiting for host {a}"), e))?;
            if from != a as u32 {
                return Err(NetnsError::Bad(format!(
                    "host {b} heard host {from} when host {a} probed it"
                )));
            }
            out.push((a as u32, b as u32, 64 - ttl + 1));
        }
    }
    Ok(out)
}

/// Ask for each datagram's TTL (`IP_RECVTTL`).
fn ask_ttl(s: &UdpSocket) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and an int option of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_RECVTTL,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One probe: the sending host it names, and the TTL it arrived with.
fn recv_with_ttl(s: &UdpSocket) -> std::io::Result<(u32, u32)> {
    let mut data = [0u8; 4];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain integers and pointers; all-zero bytes are valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `hdr` names one iovec over `data` and `control`'s bytes, both alive for the call.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut hdr, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    if n != 4 {
        return Err(bad("a probe of the wrong length"));
    }
    // SAFETY: the kernel filled `hdr`'s control buffer; CMSG_* walk within msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&hdr) };
    while !cmsg.is_null() {
        // SAFETY: a header the kernel wrote inside the control buffer.
        let c = unsafe { &*cmsg };
        if c.cmsg_level == libc::IPPROTO_IP && c.cmsg_type == libc::IP_TTL {
            // SAFETY: an IP_TTL message carries one int.
            let ttl = unsafe { (libc::CMSG_DATA(cmsg) as *const libc::c_int).read_unaligned() };
            return Ok((u32::from_le_bytes(data), ttl as u32));
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&hdr, cmsg) };
    }
    Err(bad("a probe without its TTL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(t: &Torus, from: u32, to: u32) -> u32 {
        let (mut at, mut n) = (from, 0);
        while let Some((_, via)) = next_hop(t, at, to) {
            at = via;
            n += 1;
            assert!(n <= t.diameter(), "{from} -> {to} loops");
        }
        n
    }

    #[test]
    fn dimension_ordered_routes_take_the_formulas_hop_count() {
        for dims in [
            [2, 2, 2],
            [4, 4, 4],
            [3, 5, 2],
            [8, 1, 1],
            [1, 1, 1],
            [4, 2, 3],
        ] {
            let t = Torus { dims };
            for a in 0..t.size() as u32 {
                for b in 0..t.size() as u32 {
                    assert_eq!(walk(&t, a, b), t.hops(Rank(a), Rank(b)), "{t}: {a} -> {b}");
                }
            }
        }
    }

    #[test]
    fn every_port_has_its_other_end_and_every_link_is_made_once() {
        for dims in [[2, 2, 2], [4, 4, 4], [3, 2, 1]] {
            let t = Torus { dims };
            let l = links(&t);
            let ends: usize = (0..t.size() as u32).map(|h| ports(&t, h).len()).sum();
            assert_eq!(l.len() * 2, ends, "{t}");
            for &(a, p, b) in &l {
                assert!(ports(&t, b).contains(&p.back()), "{t}: {a} {p:?} {b}");
                assert_eq!(step(&t, b, p.back()), a);
            }
            // A route's port is always one the host has.
            for a in 0..t.size() as u32 {
                for b in 0..t.size() as u32 {
                    if let Some((p, _)) = next_hop(&t, a, b) {
                        assert!(ports(&t, a).contains(&p), "{t}: {a} -> {b} via {p:?}");
                    }
                }
            }
        }
    }
}
