//! How a protocol's messages travel, said once per protocol.
//!
//! Every protocol's message type derives its rkyv archive itself (`#[derive(Archive,
//! Serialize, Deserialize)]`: a derive is not I/O, protocols still never touch a socket) and
//! implements [`Message`] to name its protocol with a [`Tag`]. The wire frames any such type
//! without knowing which it is (`wire::Framed` is implemented for all of them), and the
//! receiver validates the archive and reads it where it lies. So a message is written once:
//! no twin enum on the wire, no conversions in either direction.

use crate::buf::Payload;

/// Which protocol a frame's message belongs to: a byte of the frame header. A node runs one
/// protocol type; a frame tagged for another is refused and its connection closed.
pub type Tag = u8;

/// A protocol's message type, as the wire sees it.
pub trait Message: Sized + Send + 'static {
    /// This protocol's tag, unique among weft's protocols (see [`TAGS`]).
    const TAG: Tag;
    /// The protocol's name, for refusals ("a ping frame on a membership connection").
    const NAME: &'static str;
    /// Bulk data (large payloads, e.g. ping-pong): its frames carry a MAC only when the
    /// connection asked for bulk integrity, since hashing megabytes costs more than moving
    /// them. Control messages (membership, overlay, broadcast) always carry one.
    const BULK: bool = false;

    /// A second tag, for a protocol whose messages are part control, part bulk (the router:
    /// acknowledgements and the application's data): its messages for which [`Message::is_bulk`]
    /// holds travel under this tag and carry a MAC only under bulk integrity, the rest under
    /// [`Message::TAG`] with one always. A frame of this tag that reads back as a control
    /// message is refused, so a control message cannot come without its MAC.
    const BULK_TAG: Option<Tag> = None;

    /// Whether this message is bulk data ([`Message::BULK`] for a protocol of one tag).
    fn is_bulk(&self) -> bool {
        Self::BULK
    }

    /// The payload a sender may splice into its send queue by reference instead of copying
    /// (the bytes the serializer will meet); `None` for messages without one.
    fn payload(&self) -> Option<&Payload> {
        None
    }
}

/// Every tag in use and its protocol, kept here so that a new protocol picks a free one (a
/// test checks that each message type's [`Message::TAG`] is the one listed). weft's own
/// protocols take tags below [`APP_TAGS`]; the rest are left to applications that embed weft
/// with messages of their own (`examples/embed.rs`).
pub const TAGS: &[(Tag, &str)] = &[
    (1, "ping"),
    (2, "overlay"),
    (3, "relay"),
    (4, "membership"),
    (5, "order"),
    (6, "storage"),
    (7, "agreement"),
    (8, "route"),
    (9, "grid"),
    (10, "bsp"),
    (11, "uniform"),
    (12, "route"),
];

/// The first tag left to applications.
pub const APP_TAGS: Tag = 128;

/// `$action!(T)` for each of weft's own message types `T`, in [`TAGS`] order of their first
/// tags: the one list that the tag test, the wire's round trip and the fuzz target walk, so
/// that a new protocol's messages cannot be left out of any of them. [`TAGS`] has one entry
/// per tag: a type's [`Message::TAG`], and its [`Message::BULK_TAG`] if it has one.
///
/// ```
/// use weft::proto::message::{Message, TAGS};
/// let mut tags = 0;
/// macro_rules! count {
///     ($m:ty) => {
///         tags += 1 + usize::from(<$m as Message>::BULK_TAG.is_some());
///     };
/// }
/// weft::for_each_message!(count);
/// assert_eq!(tags, TAGS.len());
/// ```
#[macro_export]
macro_rules! for_each_message {
    ($action:ident) => {
        $action!($crate::proto::ping::PingMsg);
        $action!($crate::proto::overlay::OverlayMsg);
        $action!($crate::proto::relay::RelayMsg);
        $action!($crate::proto::membership::MemberMsg);
        $action!($crate::proto::broadcast::OrderMsg);
        $action!($crate::proto::storage::StoreMsg);
        $action!($crate::proto::agreement::AgreeMsg);
        $action!($crate::proto::route::RouteMsg);
        $action!($crate::proto::grid::GridMsg);
        $action!($crate::proto::bsp::BspMsg);
        $action!($crate::proto::uniform::UniformMsg);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed<M: Message>() -> bool {
        TAGS.contains(&(M::TAG, M::NAME))
    }

    #[test]
    fn tags_are_unique_and_every_message_type_is_listed() {
        let mut tags: Vec<Tag> = TAGS.iter().map(|t| t.0).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), TAGS.len(), "two protocols share a tag");
        assert!(!tags.contains(&0), "0 marks frames that carry no message");
        assert!(
            tags.iter().all(|&t| t < APP_TAGS),
            "weft's tags stay below the applications'"
        );
        // Every message type is listed under its own tag, in TAGS order, and every tag has
        // one: the list `for_each_message!` walks is the table.
        let mut walked: Vec<(Tag, &str)> = Vec::new();
        macro_rules! note {
            ($m:ty) => {
                assert!(listed::<$m>(), "{} is not in TAGS", <$m as Message>::NAME);
                walked.push((<$m as Message>::TAG, <$m as Message>::NAME));
                if let Some(bulk) = <$m as Message>::BULK_TAG {
                    walked.push((bulk, <$m as Message>::NAME));
                }
            };
        }
        crate::for_each_message!(note);
        walked.sort_unstable();
        assert_eq!(walked, TAGS);
    }
}
