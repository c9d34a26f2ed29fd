//! Any protocol's messages as frames, without listing them.
//!
//! A protocol's message type derives its rkyv archive and names its protocol
//! ([`crate::proto::Message`]); [`Framed`] is implemented for every such type. Sending appends
//! a frame to a connection's send queue, the body serialized in place and a large payload
//! spliced by reference ([`super::sendq`]); receiving checks the frame's tag against the
//! protocol, validates the archive where it lies in the receive buffer and reads it, sharing
//! large payloads with that buffer ([`Frame::share`]).

use super::decoder::Frame;
use super::mac::FrameMac;
use super::sendq::SendQueue;
use super::WireError;
use crate::buf::{Payload, SharesPayload};
use crate::proto::message::Tag;
use crate::proto::pair::Either;
use crate::proto::Message;
use rkyv::api::high::HighValidator;
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor::{BoxedError, Failure, Strategy};
use rkyv::{Archive, Deserialize};

/// A protocol message type the wire can send and receive: every [`Message`] whose derived
/// archive validates and reads back (a blanket implementation; nothing to write by hand), and
/// the messages of protocols run side by side on one node ([`crate::proto::pair::Either`]),
/// each frame read by the one whose tag it carries.
pub trait Framed: Sized + Send + 'static {
    /// The messages frames of `tag` carry, if this type reads them: their name and whether
    /// they are bulk data ([`Message::BULK`]).
    fn reads(tag: Tag) -> Option<(&'static str, bool)>;

    /// A name for this type in errors (the first protocol's, for a pair).
    fn name() -> &'static str;

    /// Whether this message is bulk data: its frame carries a MAC only when the session asked
    /// for bulk integrity.
    fn bulk(&self) -> bool;

    /// Append this message to `q` as one frame, with a MAC from `mac` when given. On an error
    /// the queue is left as it was.
    fn push_onto(&self, q: &mut SendQueue, mac: Option<&mut FrameMac>) -> Result<(), WireError>;

    /// The message `frame` carries: its tag must be this protocol's, its body a valid archive.
    /// Large payloads are shared with the frame's receive buffer, not copied.
    fn read(frame: &Frame) -> Result<Self, WireError>;
}

/// Reads payloads out of one frame, sharing its receive buffer ([`Frame::share`]).
struct FrameShare<'f>(&'f Frame);

impl SharesPayload for FrameShare<'_> {
    fn share(&mut self, sub: &[u8]) -> Payload {
        self.0.share(sub)
    }
}

impl<M> Framed for M
where
    M: Message + Archive + super::sendq::Serializable,
    M::Archived: for<'a> CheckBytes<HighValidator<'a, Failure>>
        + for<'a> CheckBytes<HighValidator<'a, BoxedError>>
        + for<'f> Deserialize<M, Strategy<FrameShare<'f>, Failure>>,
{
    fn reads(tag: Tag) -> Option<(&'static str, bool)> {
        if tag == M::TAG {
            Some((M::NAME, M::BULK && M::BULK_TAG.is_none()))
        } else {
            (Some(tag) == M::BULK_TAG).then_some((M::NAME, true))
        }
    }

    fn name() -> &'static str {
        M::NAME
    }

    #[inline]
    fn bulk(&self) -> bool {
        self.is_bulk()
    }

    fn push_onto(&self, q: &mut SendQueue, mac: Option<&mut FrameMac>) -> Result<(), WireError> {
        let tag = match M::BULK_TAG {
            Some(bulk) if self.is_bulk() => bulk,
            _ => M::TAG,
        };
        q.push_framed(self, tag, mac)
    }

    fn read(frame: &Frame) -> Result<Self, WireError> {
        let bulk_tag = Some(frame.tag) == M::BULK_TAG;
        if frame.tag != M::TAG && !bulk_tag {
            return Err(WireError::WrongProtocol {
                tag: frame.tag,
                want: M::NAME,
            });
        }
        let archived = access::<M>(frame.body())?;
        let msg = rkyv::api::deserialize_using::<M, _, Failure>(archived, &mut FrameShare(frame))
            .map_err(|_| {
            WireError::Malformed(format!("{} message does not read back", M::NAME))
        })?;
        // Each tag carries its own kind: a control message under the bulk tag would have
        // come without the MAC its kind always has, and bulk under the control tag is not
        // what any sender of this version writes.
        if M::BULK_TAG.is_some() && bulk_tag != msg.is_bulk() {
            return Err(WireError::Malformed(format!(
                "a {} {} message under tag {}",
                M::NAME,
                if msg.is_bulk() { "bulk" } else { "control" },
                frame.tag
            )));
        }
        Ok(msg)
    }
}

/// Two protocols' messages on one node ([`crate::proto::pair::Pair`]): each frame is read by
/// the side whose tag it carries, the first side's first.
impl<A: Framed, B: Framed> Framed for Either<A, B> {
    fn reads(tag: Tag) -> Option<(&'static str, bool)> {
        A::reads(tag).or_else(|| B::reads(tag))
    }

    fn name() -> &'static str {
        A::name()
    }

    #[inline]
    fn bulk(&self) -> bool {
        match self {
            Either::First(m) => m.bulk(),
            Either::Second(m) => m.bulk(),
        }
    }

    fn push_onto(&self, q: &mut SendQueue, mac: Option<&mut FrameMac>) -> Result<(), WireError> {
        match self {
            Either::First(m) => m.push_onto(q, mac),
            Either::Second(m) => m.push_onto(q, mac),
        }
    }

    fn read(frame: &Frame) -> Result<Self, WireError> {
        if A::reads(frame.tag).is_some() {
            A::read(frame).map(Either::First)
        } else {
            B::read(frame).map(Either::Second)
        }
    }
}

/// Validate a body as `M`'s archive and view it in place. `body` must start 16-byte aligned
/// (frame bodies in a [`super::FrameDecoder`]'s buffer do).
///
/// The check runs with rkyv's zero-sized error type first: every byte is checked the same, but
/// no error context is built along the way, and it costs a third of the cycles (a warm loop:
/// 12–17 against 32–53 per 32-byte ping). Only a body that fails is checked again, with
/// `BoxedError`, for a readable reason.
pub fn access<M>(body: &[u8]) -> Result<&M::Archived, WireError>
where
    M: Message + Archive,
    M::Archived: for<'a> CheckBytes<HighValidator<'a, Failure>>
        + for<'a> CheckBytes<HighValidator<'a, BoxedError>>,
{
    if let Ok(m) = rkyv::access::<M::Archived, Failure>(body) {
        return Ok(m);
    }
    let why = match rkyv::access::<M::Archived, BoxedError>(body) {
        Err(e) => without_addresses(&e.to_string()),
        Ok(_) => "rejected by the check, accepted by the explained one".into(),
    };
    Err(WireError::Malformed(format!("{} message: {why}", M::NAME)))
}

/// `why` with every hexadecimal address (`0x00007f01a000d000`) replaced by `…`: rkyv's
/// explanations name the heap addresses of the buffer they checked, and a refusal reason that a
/// node prints must not tell a stranger where its heap lies.
pub fn without_addresses(why: &str) -> String {
    let mut out = String::with_capacity(why.len());
    let mut rest = why;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..]
            .bytes()
            .take_while(u8::is_ascii_hexdigit)
            .count();
        if digits >= 8 {
            out.push('…');
        } else {
            out.push_str(&rest[at..at + 2 + digits]);
        }
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}

/// `msg` as one frame appended to `out` (no MAC, no padding frame in front): for tests, fuzz
/// seeds and tools. `out` must end on a frame boundary (a multiple of 16 bytes).
pub fn write_frame<M: Framed>(msg: &M, out: &mut Vec<u8>) -> Result<(), WireError> {
    frame_into(msg, None, out)
}

/// [`write_frame`] sealed with `mac`, the sending direction of a connection's session
/// ([`super::mac::Session::send`]): what an authenticated peer sends, for tools and for tests
/// that play one.
pub fn write_sealed_frame<M: Framed>(
    msg: &M,
    mac: &mut FrameMac,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    frame_into(msg, Some(mac), out)
}

fn frame_into<M: Framed>(
    msg: &M,
    mac: Option<&mut FrameMac>,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    use super::frame::{FrameHeader, Kind};
    let mut q = SendQueue::new();
    msg.push_onto(&mut q, mac)?;
    let bytes = q.to_vec();
    let mut at = 0;
    while let Some(h) = FrameHeader::parse(&bytes[at..], u32::MAX)? {
        if h.kind != Kind::Pad {
            out.extend_from_slice(&bytes[at..at + h.frame_len()]);
        }
        at += h.frame_len();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bmg::BmgMsg;
    use crate::proto::membership::{MemberMsg, Regroup};
    use crate::proto::overlay::OverlayMsg;
    use crate::proto::ping::PingMsg;
    use crate::proto::relay::RelayMsg;
    use crate::proto::ring::RingMsg;
    use crate::proto::Message;
    use crate::wire::FrameDecoder;
    use crate::NodeId;

    fn round_trip<M: Framed + Message + PartialEq + std::fmt::Debug>(msgs: &[M]) {
        let mut bytes = Vec::new();
        for m in msgs {
            write_frame(m, &mut bytes).unwrap();
        }
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&bytes);
        let mut back = Vec::new();
        while let Some(f) = dec.next_frame().unwrap() {
            let m = M::read(&f).unwrap();
            let tag = match M::BULK_TAG {
                Some(bulk) if m.is_bulk() => bulk,
                _ => M::TAG,
            };
            assert_eq!(f.tag, tag, "{m:?}");
            back.push(m);
        }
        assert_eq!(back, msgs);
    }

    /// The router's data travels under its bulk tag, its acknowledgements under its control
    /// tag, and a frame whose tag does not match its kind is refused: a control message cannot
    /// come under the tag whose frames need no MAC.
    #[test]
    fn each_of_the_routers_tags_carries_its_own_kind() {
        use crate::proto::route::RouteMsg;
        let samples = RouteMsg::samples();
        assert_eq!(RouteMsg::reads(RouteMsg::TAG), Some(("route", false)));
        assert_eq!(RouteMsg::reads(12), Some(("route", true)));
        for m in &samples {
            let mut bytes = Vec::new();
            write_frame(m, &mut bytes).unwrap();
            let theirs = if m.is_bulk() { 12 } else { RouteMsg::TAG };
            assert_eq!(bytes[6], theirs, "{m:?}");
            // The same body under the other tag.
            bytes[6] = if m.is_bulk() { RouteMsg::TAG } else { 12 };
            let mut dec = FrameDecoder::new(1 << 20);
            dec.push(&bytes);
            let f = dec.next_frame().unwrap().unwrap();
            assert!(
                matches!(RouteMsg::read(&f), Err(WireError::Malformed(_))),
                "{m:?} read under tag {}",
                bytes[6]
            );
        }
        assert!(samples.iter().any(|m| m.is_bulk()) && samples.iter().any(|m| !m.is_bulk()));
    }

    /// Two protocols' messages on one node: each frame comes back as the side whose tag it
    /// carries, and a frame of neither is refused, naming the tag.
    #[test]
    fn a_pair_reads_each_frame_by_its_tag() {
        type Two = Either<PingMsg, RelayMsg>;
        let msgs: Vec<Two> = PingMsg::samples()
            .into_iter()
            .map(Either::First)
            .chain(RelayMsg::samples().into_iter().map(Either::Second))
            .collect();
        let mut bytes = Vec::new();
        for m in &msgs {
            write_frame(m, &mut bytes).unwrap();
        }
        write_frame(&OverlayMsg::samples()[0], &mut bytes).unwrap();
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&bytes);
        let mut back = Vec::new();
        while let Some(f) = dec.next_frame().unwrap() {
            match Two::read(&f) {
                Ok(m) => back.push(m),
                Err(WireError::WrongProtocol { tag, .. }) => {
                    assert_eq!(tag, OverlayMsg::TAG);
                    assert_eq!(Two::reads(tag), None);
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(back, msgs);
        assert_eq!(
            Two::reads(PingMsg::TAG),
            Some((PingMsg::NAME, PingMsg::BULK))
        );
        assert_eq!(
            Two::reads(RelayMsg::TAG),
            Some((RelayMsg::NAME, RelayMsg::BULK))
        );
    }

    /// Messages of one type to send through the wire in the round trip: each of weft's message
    /// types must have some (`for_each_message!` walks them all; a missing impl does not
    /// compile).
    trait Samples: Sized {
        fn samples() -> Vec<Self>;
    }

    impl Samples for PingMsg {
        fn samples() -> Vec<Self> {
            vec![
                PingMsg::Ping {
                    seq: 1,
                    payload: vec![3; 40].into(),
                },
                PingMsg::Pong {
                    seq: 2,
                    payload: vec![4; 20_000].into(),
                },
            ]
        }
    }

    impl Samples for OverlayMsg {
        fn samples() -> Vec<Self> {
            vec![
                OverlayMsg::Ring(RingMsg::FConnect(NodeId(1))),
                RingMsg::Info(NodeId(2)).into(),
                RingMsg::AskConnect(NodeId(3)).into(),
                RingMsg::BConnect(NodeId(4)).into(),
                BmgMsg::Up {
                    ident: NodeId(5),
                    hop: 6,
                }
                .into(),
                BmgMsg::Dn {
                    ident: NodeId(7),
                    hop: 8,
                }
                .into(),
            ]
        }
    }

    impl Samples for RelayMsg {
        fn samples() -> Vec<Self> {
            vec![RelayMsg::Token { hops: 99 }]
        }
    }

    impl Samples for crate::proto::agreement::AgreeMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::agreement::AgreeMsg as A;
            vec![
                A::Sample,
                A::Alive,
                A::Poll { round: 3 },
                A::Value {
                    round: 4,
                    value: u64::MAX,
                },
            ]
        }
    }

    impl Samples for crate::proto::route::RouteMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::route::RouteMsg as R;
            vec![
                R::Data {
                    src: 1,
                    dst: 9,
                    seq: 3,
                    tag: 77,
                    hops: 2,
                    payload: vec![1; 5000].into(),
                },
                R::Ack {
                    src: 1,
                    dst: 9,
                    seq: 3,
                    there: 2,
                    hops: 1,
                },
                R::Unreachable {
                    src: 1,
                    dst: 9,
                    seq: 4,
                    hops: 5,
                },
                R::Flood {
                    origin: 0,
                    seq: 1,
                    hops: 0,
                    payload: vec![2; 12].into(),
                },
            ]
        }
    }

    impl Samples for crate::proto::grid::GridMsg {
        fn samples() -> Vec<Self> {
            vec![crate::proto::grid::GridMsg {
                round: 7,
                data: vec![9; 64].into(),
            }]
        }
    }

    fn piece_key() -> crate::proto::storage::PieceKey {
        crate::proto::storage::PieceKey {
            vid: 3,
            version: 2,
            stripe: 1,
            slot: 4,
        }
    }

    impl Samples for crate::proto::storage::StoreMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::storage::{PieceMeta, StoreMsg as S};
            let meta = PieceMeta {
                scheme: 1,
                n: 6,
                m: 4,
                state_len: 4096,
                stripe_len: 1024,
                crc32c: 0xdead_beef,
                stripe_crc: 0x1234_5678,
                safe: true,
            };
            let key = piece_key();
            vec![
                S::Put {
                    key,
                    meta,
                    body: vec![5; 1024].into(),
                },
                S::Stored { key },
                S::Refused { key },
                S::Get { key },
                S::Got {
                    key,
                    meta,
                    body: vec![6; 10].into(),
                },
                S::Missing { key },
                S::Fold {
                    key,
                    chain: vec![1, 2, 3],
                    to: 4,
                    body: vec![7; 3].into(),
                },
                S::Folded {
                    key,
                    meta,
                    body: vec![8; 3].into(),
                },
            ]
        }
    }

    impl Samples for crate::proto::bsp::BspMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::bsp::{BspMsg as B, Known, Mail};
            vec![
                B::Store(crate::proto::storage::StoreMsg::Get { key: piece_key() }),
                B::Batch {
                    epoch: 1,
                    step: 2,
                    mail: vec![Mail {
                        to: 1,
                        from: 2,
                        value: 3,
                    }],
                },
                B::Known {
                    dead: vec![4, 5],
                    known: Some(Known {
                        step: 3,
                        version: 9,
                    }),
                    safe: None,
                    backtracks: 1,
                },
            ]
        }
    }

    impl Samples for crate::proto::uniform::UniformMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::uniform::UniformMsg;
            vec![
                UniformMsg::Contribute {
                    k: 3,
                    value: u64::MAX,
                    op: 2,
                },
                UniformMsg::Decide {
                    k: 3,
                    value: 7,
                    failed: vec![0, 5, 1 << 40],
                },
                UniformMsg::Revoke { origin: 9, seq: 2 },
            ]
        }
    }

    impl Samples for crate::proto::broadcast::OrderMsg {
        fn samples() -> Vec<Self> {
            use crate::proto::broadcast::{Entry, OrderMsg as O, Term, What};
            use crate::proto::order::Stamp;
            let term = Term {
                n: 2,
                root: NodeId(1),
            };
            let stamp = Stamp { gen: 1, len: 3 };
            vec![
                O::Request {
                    inc: 1,
                    seq: 2,
                    body: vec![1; 8].into(),
                },
                O::Bcast {
                    entry: Entry {
                        bi: 5,
                        origin: NodeId(3),
                        seq: 2,
                        stamp,
                        what: What::Clear { upto: 4 },
                        body: vec![2; 8].into(),
                    },
                    via: term,
                },
                O::Ack { upto: 5, stamp },
                O::Confirmed { upto: 5 },
                O::Have {
                    term,
                    next: 6,
                    dead: vec![NodeId(0)],
                },
                O::Failed {
                    id: NodeId(0),
                    next: 6,
                },
            ]
        }
    }

    impl Samples for MemberMsg {
        fn samples() -> Vec<Self> {
            member_samples()
        }
    }

    /// Every protocol's messages survive framing, validation and reading in place: each of
    /// weft's message types ([`crate::for_each_message`]), with its samples.
    #[test]
    fn every_protocols_messages_round_trip() {
        macro_rules! each {
            ($m:ty) => {
                let samples = <$m as Samples>::samples();
                assert!(
                    !samples.is_empty(),
                    "no samples of {}",
                    <$m as Message>::NAME
                );
                round_trip(&samples);
            };
        }
        crate::for_each_message!(each);
    }

    fn member_samples() -> Vec<MemberMsg> {
        vec![
            MemberMsg::HowAreYou {
                seq: 7,
                epoch: 4,
                root: NodeId(1),
            },
            MemberMsg::IAmFine { seq: 7 },
            MemberMsg::NodeFailure { failed: NodeId(3) },
            MemberMsg::FailureDetAck { failed: NodeId(3) },
            MemberMsg::RootFailure {
                failed: NodeId(0),
                epoch: 5,
            },
            MemberMsg::FailedNode(Regroup {
                epoch: 2,
                dead: vec![3, 9],
                appended: vec![],
                root: NodeId(0),
            }),
            MemberMsg::RootDead(Regroup {
                epoch: 3,
                dead: vec![0],
                appended: vec![NodeId(40)],
                root: NodeId(1),
            }),
            MemberMsg::NewNodeJoin(Regroup {
                epoch: 4,
                dead: vec![0, 7],
                appended: vec![NodeId(40), NodeId(7)],
                root: NodeId(1),
            }),
            MemberMsg::FailureAck {
                epoch: 3,
                root: NodeId(1),
            },
            MemberMsg::NewNodeJoinAck {
                epoch: 4,
                root: NodeId(1),
            },
            MemberMsg::NewNode {
                id: NodeId(40),
                epoch: 9,
            },
            MemberMsg::NodeAlive {
                id: NodeId(7),
                epoch: 3,
            },
            MemberMsg::JoinDetAck(Regroup {
                epoch: 4,
                dead: vec![],
                appended: vec![NodeId(40)],
                root: NodeId(1),
            }),
            MemberMsg::Excluded(Regroup {
                epoch: 9,
                dead: vec![1, 2],
                appended: vec![],
                root: NodeId(0),
            }),
            MemberMsg::Beat(crate::proto::heartbeat::Beat {
                seq: 3,
                watch: true,
            }),
        ]
    }

    /// A frame of another protocol is refused by name, not misread.
    #[test]
    fn another_protocols_frame_is_refused() {
        let mut b = Vec::new();
        write_frame(&RelayMsg::Token { hops: 1 }, &mut b).unwrap();
        let mut dec = FrameDecoder::new(1 << 20);
        dec.push(&b);
        let f = dec.next_frame().unwrap().unwrap();
        assert_eq!(
            MemberMsg::read(&f),
            Err(WireError::WrongProtocol {
                tag: 3,
                want: "membership"
            })
        );
    }

    /// A body the check rejects is rejected with rkyv's own reason, whichever way it is
    /// wrong: a bad variant tag, a payload length past the body, a relative pointer out of
    /// it, or too few bytes for the root; and the reason names no address.
    #[test]
    fn rejected_bodies_carry_a_readable_reason_without_addresses() {
        let good = rkyv::to_bytes::<BoxedError>(&PingMsg::Ping {
            seq: 1,
            payload: vec![5; 40].into(),
        })
        .unwrap();
        assert!(access::<PingMsg>(&good).is_ok());
        let why = |r: Result<&<PingMsg as Archive>::Archived, WireError>| match r {
            Err(WireError::Malformed(why)) => Ok(why),
            Err(e) => Err(format!("{e}")),
            Ok(_) => Err("accepted".to_string()),
        };
        let root = good.len() - std::mem::size_of::<<PingMsg as Archive>::Archived>();
        let mut cases: Vec<(&str, rkyv::util::AlignedVec<16>)> = Vec::new();
        // A ping's root: the tag, then `seq` at +8, then the payload's relative pointer (+16)
        // and length (+20).
        for (what, at, byte) in [
            ("tag", root, 0xee),
            ("length", root + 20, 0x7f),
            ("pointer", root + 16, 0x40),
        ] {
            let mut bad = good.clone();
            bad[at] = byte;
            cases.push((what, bad));
        }
        let mut short = rkyv::util::AlignedVec::<16>::new();
        short.extend_from_slice(&good[..8]);
        cases.push(("short", short));
        for (what, bad) in cases {
            match why(access::<PingMsg>(&bad)) {
                Ok(why) => {
                    assert!(
                        why.starts_with("ping message: ")
                            && !why.contains("accepted by the explained one"),
                        "{what}: {why}"
                    );
                    assert!(!why.contains("0x0000"), "{what}: an address in {why}");
                }
                Err(other) => panic!("{what}: {other}"),
            }
        }
        assert_eq!(
            without_addresses("ptr 0x00007f01a000d000 at 0x1f, end"),
            "ptr … at 0x1f, end"
        );
    }
}
