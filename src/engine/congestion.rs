//! The TCP congestion control weft's connections use.
//!
//! A machine's default may be BBR (it is on the hosts weft is measured on). BBR paces a flow at
//! its estimate of the path's bottleneck rate and bounds it to about one estimated
//! bandwidth-delay product in flight; between the processes of one job, over loopback or a
//! cluster fabric, that estimate is what limits a large message: a 1 MiB ping-pong over
//! loopback took three times as long, in modes a microsecond of timing tips
//! (`bluegene_notes/engine-latency.md#cubic-not-bbr`). So weft asks for CUBIC, Linux's usual
//! default, and takes Reno (built into every
//! kernel and allowed to every user) when CUBIC is not available to it; an unprivileged
//! process may only pick from `net.ipv4.tcp_allowed_congestion_control`.

use std::os::fd::AsFd;
use std::sync::Once;

/// What [`apply`] asks for first (`NodeOptions::congestion`'s default).
pub const PREFERRED: &str = "cubic";

/// Always there, and allowed to every user.
const FALLBACK: &str = "reno";

static NOTICE: Once = Once::new();

/// Set the congestion control of `socket` to `requested` (as in `NodeOptions::congestion`;
/// `None`: leave the system's default), or to Reno if that cannot be had (noted once per
/// process). Returns the one set, `None` if none was (asked for none, or neither could be
/// set, which is noted too).
pub fn apply(socket: &impl AsFd, requested: Option<&str>) -> Option<String> {
    let name = requested?;
    let sock = socket2::SockRef::from(socket);
    let set = |n: &str| sock.set_tcp_congestion(n.as_bytes());
    let chosen = match set(name) {
        Ok(()) => name,
        Err(why) => {
            let fallback = set(FALLBACK);
            NOTICE.call_once(|| {
                super::notice(&match &fallback {
                    Ok(()) => format!("TCP congestion control {name:?}: {why}; using {FALLBACK}"),
                    Err(e) => format!(
                        "TCP congestion control {name:?}: {why}, {FALLBACK}: {e}; keeping the \
                         system's"
                    ),
                })
            });
            fallback.ok()?;
            FALLBACK
        }
    };
    Some(chosen.to_string())
}

/// The congestion control a new connection gets when `requested` (as in
/// `NodeOptions::congestion`; `None`: the system's default) is asked for.
pub fn resolve(requested: Option<&str>) -> std::io::Result<String> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
    match apply(&probe, requested) {
        Some(name) => Ok(name),
        None => of(&probe),
    }
}

/// The congestion control in force on `socket`.
pub fn of(socket: &impl AsFd) -> std::io::Result<String> {
    let name = socket2::SockRef::from(socket).tcp_congestion()?;
    Ok(String::from_utf8_lossy(&name)
        .trim_end_matches('\0')
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket() -> std::net::TcpListener {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap()
    }

    /// Reno is always there: asking for it gets it; an algorithm the kernel does not have
    /// gets Reno, not the system's default and not an error.
    #[test]
    fn asks_for_a_name_and_falls_back_to_reno() {
        let s = socket();
        assert_eq!(apply(&s, Some("reno")).as_deref(), Some("reno"));
        assert_eq!(of(&s).unwrap(), "reno");
        let s = socket();
        assert_eq!(
            apply(&s, Some("no-such-algorithm")).as_deref(),
            Some("reno")
        );
        assert_eq!(of(&s).unwrap(), "reno");
        let s = socket();
        let got = apply(&s, Some(PREFERRED)).unwrap();
        assert!(got == PREFERRED || got == FALLBACK, "{got}");
        assert_eq!(of(&s).unwrap(), got);
    }
}
