//! Where to cut a long send so that the kernel takes in the peer's ACKs after its last
//! segment, not before.
//!
//! Within one `sendmsg`, Linux's TCP processes the socket's backlog (the ACKs that arrived
//! while the write held the socket) before it builds every 17th segment buffer
//! (`process_backlog >= 16` in `tcp_sendmsg_locked`). A 1 MiB frame on loopback is 17 buffers
//! of one 65 483-byte segment each, so its write stopped before its last 912 bytes to process
//! the ACKs of all the receiver had read, and the receiver waited for them: about 10% of the
//! one-way time. Processed after the last segment, at the end of the call, the same ACKs cost
//! the same and nobody waits (`tools/probes/ack_flush.rs`, `bluegene_notes/engine-latency.md#the-last-write-is-16-buffers`).
//!
//! So a queue longer than 16 buffers goes out in two writes: a short head, then exactly 16
//! buffers. A buffer is the kernel's GSO size goal, whole segments up to 64 KiB
//! (`tcp_xmit_size_goal`), which follows from the connection's MSS. The unit matters: with
//! loopback's MTU lowered to 1 500, a last write of 16 loopback segments (17 of that MTU's
//! buffers) was 4–5% slower than one plain write; one of 16 buffers was not, and gained weft
//! 6–7%. The MSS is asked once per connection; should the path's MTU shrink later, the last
//! write may be 17 buffers again, and large sends pay that until the connection is replaced.

use std::os::fd::AsFd;

/// Bytes of a GSO segment buffer's payload at most: 64 KiB less one and less the kernel's
/// header room (`MAX_TCP_HEADER`, 320 bytes at its largest on x86-64).
const GSO_ROOM: usize = 65_536 - 1 - 320;

/// Buffers one `sendmsg` builds before it stops to process the backlog.
const BUFFERS: usize = 16;

/// Queues up to this long are at most 16 buffers whatever the MSS, and are written whole
/// without asking the socket. The smallest buffer is one segment of just over half of
/// [`GSO_ROOM`] (two would not fit).
pub(super) const SHORT_QUEUE: usize = BUFFERS * (GSO_ROOM / 2 + 1);

/// The kernel's segment buffer for a connection of maximum segment size `mss`: as many whole
/// segments as fit in [`GSO_ROOM`], at least one.
fn size_goal(mss: usize) -> usize {
    mss * (GSO_ROOM / mss.max(1)).max(1)
}

/// The most bytes the write that ends a queue may carry: 16 buffers.
pub(super) fn last_write_max(mss: usize) -> usize {
    BUFFERS * size_goal(mss)
}

/// [`last_write_max`] for a connected TCP socket, from its MSS (`TCP_MAXSEG`); if the socket
/// cannot say, 15 × 64 KiB, at most 16 buffers for any size goal from 61 440 bytes (loopback,
/// and MTUs of 1 500 and 9 000 bytes).
pub(super) fn of_socket(socket: impl AsFd) -> usize {
    match socket2::SockRef::from(&socket).tcp_mss() {
        Ok(mss) if mss > 0 => last_write_max(mss as usize),
        _ => 15 << 16,
    }
}

/// Bytes to write next of `queued`: all of them, or all but the last `last_write_max`, so that
/// the write that ends the queue builds no more than 16 buffers.
pub(super) fn next_write_len(queued: usize, last_write_max: usize) -> usize {
    if queued > last_write_max {
        queued - last_write_max
    } else {
        queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size goals of loopback (MTU 65 536), Ethernet (1 500), jumbo frames (9 000) and
    /// the minimum MSS, with TCP timestamps.
    #[test]
    fn sixteen_buffers_of_common_segments() {
        assert_eq!(last_write_max(65_483), 16 * 65_483);
        assert_eq!(last_write_max(1_448), 16 * 45 * 1_448);
        assert_eq!(last_write_max(8_948), 16 * 7 * 8_948);
        assert_eq!(last_write_max(536), 16 * 121 * 536);
        // A 1 MiB frame over loopback: its head is 912 bytes, the rest exactly 16 segments.
        assert_eq!(next_write_len((1 << 20) + 64, last_write_max(65_483)), 912);
    }

    /// No MSS makes 16 buffers shorter than a queue written whole without asking.
    #[test]
    fn a_short_queue_never_needs_cutting() {
        for mss in 1..=65_535 {
            assert!(last_write_max(mss) >= SHORT_QUEUE, "mss {mss}");
        }
    }

    #[test]
    fn only_the_end_of_a_long_queue_is_cut_off() {
        for queued in [1, 65_536, 1_000_000] {
            assert_eq!(next_write_len(queued, 1_000_000), queued);
        }
        for queued in [1_000_001, 4 << 20] {
            let head = next_write_len(queued, 1_000_000);
            assert_eq!(queued - head, 1_000_000);
            assert_eq!(next_write_len(queued - head, 1_000_000), 1_000_000);
        }
    }

    /// A connected loopback socket says its MSS: 16 of its buffers.
    #[test]
    fn a_connected_socket_gives_sixteen_of_its_buffers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mss = socket2::SockRef::from(&a).tcp_mss().unwrap() as usize;
        assert_eq!(of_socket(&a), last_write_max(mss));
        assert!(of_socket(&a) >= SHORT_QUEUE);
    }
}
