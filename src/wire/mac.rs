//! Frame by frame authentication, once the handshake is done.
//!
//! The handshake proves that both ends know the job key, but on its own it vouches for nothing
//! that follows: a relay placed between two nodes could pass their handshake through and then
//! inject a frame of its own (a `NodeFailure` of a live node, and the job splits). So each end
//! derives two session keys from the job key and the handshake's whole transcript (both
//! nonces, ids, incarnations and job parameters; `handshake::Handshake::session`), one per
//! direction, and every message frame it sends carries a 16-byte tag:
//!
//! ```text
//! MAC = GMAC(AES-256, key of the direction, nonce = counter, data = header ‖ body)
//! ```
//!
//! GMAC is AES-GCM with nothing to encrypt (NIST SP 800-38D): the tag is GHASH over the data,
//! masked with the block cipher's output for the nonce. `counter` (a u64, little endian, in
//! the 96-bit nonce) is how many authenticated frames that direction carried before this one.
//! Fresh handshake nonces make the keys new on every connection, so frames from another
//! connection fail; the counter makes a dropped, replayed or reordered frame fail, and never
//! repeats a nonce under one key (GMAC's one requirement). A forger has one chance in 2^128
//! per try, and a failed check closes the connection.
//!
//! Why GMAC and not HMAC-SHA256, which the handshake uses: a control frame's tag is on every
//! message's path, and with AES-NI and carry-less multiplication GMAC costs 52–90 ns for a
//! 48–100-byte body against HMAC-SHA256's 153–187 ns (2026-11-26, Intel Xeon; see
//! `bluegene_notes/engine-latency.md#frames-are-authenticated`).
//!
//! Which frames carry one: every message of a control protocol (membership, overlay, relay:
//! small, so the tag costs little), and bulk messages (`proto::Message::BULK`, ping-pong
//! payloads) only when the connection asked for bulk integrity in its handshake. The receiver
//! decides what it requires from its own protocol type, never from the frame's flag.

use super::WireError;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes256Enc;
use ghash::universal_hash::UniversalHash;
use ghash::GHash;

/// Bytes of a frame's MAC ([`super::frame::MAC_LEN`]).
pub use super::frame::MAC_LEN;

/// GHASH's block.
const BLOCK: usize = 16;

/// One direction's key and counter.
#[derive(Clone)]
pub struct FrameMac {
    /// The block cipher keyed for this direction.
    aes: Aes256Enc,
    /// GHASH keyed with the cipher's image of the zero block, cloned per frame.
    ghash: GHash,
    counter: u64,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        write!(f, "FrameMac {{ counter: {} }}", self.counter)
    }
}

impl FrameMac {
    /// A direction keyed with `key`, its counter at 0.
    pub fn new(key: &[u8; 32]) -> Self {
        let aes = Aes256Enc::new(key.into());
        let mut h = aes::Block::default();
        aes.encrypt_block(&mut h);
        Self {
            ghash: GHash::new(&h),
            aes,
            counter: 0,
        }
    }

    /// GMAC of the concatenation of `parts` with the counter as nonce. The parts need not be
    /// whole blocks: bytes are carried over to the next part, and GHASH sees the data as one
    /// string padded at its end, as AES-GCM's additional data.
    fn tag<'a>(&self, parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; MAC_LEN] {
        let mut g = self.ghash.clone();
        let (mut carry, mut have, mut total) = ([0u8; BLOCK], 0usize, 0u64);
        for mut p in parts {
            total += p.len() as u64;
            if have > 0 {
                let take = (BLOCK - have).min(p.len());
                carry[have..have + take].copy_from_slice(&p[..take]);
                have += take;
                p = &p[take..];
                if have < BLOCK {
                    continue;
                }
                g.update(&[carry.into()]);
            }
            let whole = p.len() / BLOCK * BLOCK;
            // Whole blocks only: nothing is padded here.
            g.update_padded(&p[..whole]);
            let rest = &p[whole..];
            carry[..rest.len()].copy_from_slice(rest);
            have = rest.len();
        }
        if have > 0 {
            carry[have..].fill(0);
            g.update(&[carry.into()]);
        }
        // The lengths block: the data's length in bits, and no ciphertext.
        let mut lengths = [0u8; BLOCK];
        lengths[..8].copy_from_slice(&(total * 8).to_be_bytes());
        g.update(&[lengths.into()]);
        let hash = g.finalize();
        // J0 = nonce ‖ 0^31 ‖ 1 for a 96-bit nonce; the nonce is the counter, zero-padded.
        let mut mask = aes::Block::default();
        mask[..8].copy_from_slice(&self.counter.to_le_bytes());
        mask[BLOCK - 1] = 1;
        self.aes.encrypt_block(&mut mask);
        let mut tag = [0u8; MAC_LEN];
        for (t, (h, m)) in tag.iter_mut().zip(hash.iter().zip(mask.iter())) {
            *t = h ^ m;
        }
        tag
    }

    /// The MAC of the next frame sent, whose header and body are `parts` in order.
    pub fn seal<'a>(&mut self, parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; MAC_LEN] {
        let tag = self.tag(parts);
        self.counter += 1;
        tag
    }

    /// Check the MAC `got` of the next frame received, whose header and body are `parts`.
    /// Compared in constant time.
    pub fn verify<'a>(
        &mut self,
        parts: impl IntoIterator<Item = &'a [u8]>,
        got: &[u8],
    ) -> Result<(), WireError> {
        let want = self.tag(parts);
        let same = got.len() == MAC_LEN
            && want.iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if !same {
            return Err(WireError::BadMac(self.counter));
        }
        self.counter += 1;
        Ok(())
    }
}

/// A connection's session: the two directions' keys, and whether bulk messages are
/// authenticated too.
#[derive(Clone, Debug)]
pub struct Session {
    /// Frames this end sends.
    pub send: FrameMac,
    /// Frames this end receives.
    pub recv: FrameMac,
    /// Bulk messages carry a MAC as well (either end asked for it in its Hello).
    pub bulk: bool,
}

impl Session {
    /// Whether a message of a protocol whose messages are `bulk` is authenticated.
    pub fn covers(&self, bulk: bool) -> bool {
        !bulk || self.bulk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_verifies_once_in_order_and_only_with_its_key() {
        let (mut a, mut b) = (FrameMac::new(&[7; 32]), FrameMac::new(&[7; 32]));
        let t0 = a.seal([&b"header"[..], b"body"]);
        let t1 = a.seal([&b"header"[..], b"body"]);
        assert_ne!(t0, t1, "the counter is in the MAC");
        // Out of order: the second frame's MAC fails where the first is expected.
        assert_eq!(
            b.clone().verify([&b"header"[..], b"body"], &t1),
            Err(WireError::BadMac(0))
        );
        b.verify([&b"header"[..], b"body"], &t0).unwrap();
        // Replayed: the first frame again fails where the second is expected.
        assert!(b.clone().verify([&b"header"[..], b"body"], &t0).is_err());
        // Changed bytes, however they are split.
        assert!(b.clone().verify([&b"headeR"[..], b"body"], &t1).is_err());
        assert!(b.clone().verify([&b"head"[..], b"erbody"], &t1).is_ok());
        // Another key.
        assert!(FrameMac::new(&[8; 32])
            .verify([&b"header"[..], b"body"], &t0)
            .is_err());
        b.verify([&b"header"[..], b"body"], &t1).unwrap();
        assert!(
            b.verify([&b"header"[..], b"body"], &t1[..8]).is_err(),
            "short"
        );
        assert!(!format!("{b:?}").contains('['), "no key bytes in Debug");
    }
    /// The tag is AES-256-GCM's over the same data as additional data, with nothing to
    /// encrypt and the counter as nonce, however the data is cut into parts.
    #[test]
    fn the_tag_is_aes_gcm_over_the_frame_as_additional_data() {
        use aes_gcm::{AeadInPlace, Aes256Gcm, KeyInit as _, Nonce};
        let key = [0x5a; 32];
        let gcm = Aes256Gcm::new_from_slice(&key).unwrap();
        for len in [0usize, 1, 15, 16, 17, 31, 48, 100, 1000] {
            let data: Vec<u8> = (0..len as u32).map(|i| (i * 7 + 3) as u8).collect();
            for counter in [0u64, 1, 5, u64::MAX] {
                let mut nonce = [0u8; 12];
                nonce[..8].copy_from_slice(&counter.to_le_bytes());
                let want = gcm
                    .encrypt_in_place_detached(Nonce::from_slice(&nonce), &data, &mut [])
                    .unwrap();
                for cuts in [
                    vec![],
                    vec![0],
                    vec![3],
                    vec![16],
                    vec![5, 9, 40],
                    vec![1, 2, 3],
                ] {
                    let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
                    bounds.insert(0, 0);
                    bounds.push(len);
                    bounds.sort_unstable();
                    let parts: Vec<&[u8]> = bounds.windows(2).map(|w| &data[w[0]..w[1]]).collect();
                    let mac = FrameMac {
                        counter,
                        ..FrameMac::new(&key)
                    };
                    assert_eq!(mac.tag(parts.iter().copied())[..], want[..], "len {len}");
                }
            }
        }
    }

    /// NIST's GCM test case 13 (AES-256, zero key, zero IV, no data): the tag alone.
    #[test]
    fn nist_gcm_test_case_13() {
        let tag = FrameMac::new(&[0; 32]).tag([&[][..]]);
        let want: [u8; 16] = [
            0x53, 0x0f, 0x8a, 0xfb, 0xc7, 0x45, 0x36, 0xb9, 0xa9, 0x63, 0xb4, 0xf1, 0xc4, 0xcb,
            0x73, 0x8b,
        ];
        assert_eq!(tag, want);
    }
}
