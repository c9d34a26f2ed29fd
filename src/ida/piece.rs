//! The piece format: a self-describing file per piece, so any `m` of them rebuild the original
//! with no other metadata.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "WEFTIDA1"
//!      8     4  header length H (u32, little endian); 64 in versions 1 and 2
//!     12     4  header CRC: CRC-32C of the H header bytes (u32 LE); zero in version 1
//!     16     H  header: an rkyv 0.8 archive of `PieceHeader` (layout below)
//!   16+H     …  zero padding to a multiple of 16 (none for H = 64)
//!      B     L  body: the piece's L = ceil(file_len / m) bytes, B = 16 + H rounded up to 16
//! ```
//!
//! The archived header is a C-layout struct, all integers little endian, at the start of the
//! header bytes (rkyv places the root last; this struct has no out-of-line data, so it is the
//! whole archive and H = 64):
//!
//! ```text
//!  0  u64  file_len      bytes of the original file
//!  8  u64  piece_len     L
//! 16  [32] file_sha256   SHA-256 of the original file
//! 48  u32  body_crc32c   CRC-32C of the body
//! 52  u16  version       2 (1: no header CRC, still read)
//! 54  u8   mode          0 = rabin, 1 = systematic
//! 55  u8   n
//! 56  u8   m
//! 57  u8   index         0..n
//! 58  [6]  padding (struct alignment 8), zero
//! ```
//!
//! Both CRCs are CRC-32C (Castagnoli: polynomial 0x1EDC6F41, reflected, initial value and
//! final XOR 0xFFFFFFFF; "123456789" gives 0xE3069283). A reader checks, in order: magic, H
//! (only 64 is allowed), the header CRC (a version-1 piece has zero there and version 1 in its
//! header), the header's fields (1 <= m <= n, index < n, L = ceil(file_len / m), a known
//! mode), the body length and the body CRC.
//!
//! To rebuild without weft: take any `m` pieces with the same `file_sha256`, `file_len`, `n`,
//! `m` and `mode` and distinct indices. Build the `n × m` matrix of [`super::dispersal`] for
//! `mode` over GF(2^8) with the polynomial 0x11d (x^8 + x^4 + x^3 + x^2 + 1; addition is
//! XOR): Rabin mode is the Vandermonde matrix `A[i][j] = (i + 1)^j`; systematic mode is the
//! identity on rows `0..m` and, below it, the Cauchy matrix `A[m + i][j] = 1 / ((m + i) XOR
//! j)`. Keep the rows of the pieces' indices, invert that `m × m` matrix,
//! and multiply it by the bodies (as `m` rows of L bytes) to get `m` chunks of L bytes. The
//! file is the chunks concatenated (chunk `j` holds bytes `j·L .. (j+1)·L`, the last padded
//! with zeros by the encoder), truncated to `file_len`; check its SHA-256.

use super::{Dispersal, IdaError, Mode};
use rkyv::rancor::BoxedError;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Borrow;

/// Magic bytes at the start of every piece.
pub const MAGIC: &[u8; 8] = b"WEFTIDA1";
/// The format version this code writes (it reads this one and version 1).
pub const VERSION: u16 = 2;
/// The first version, without a header CRC.
const VERSION_1: u16 = 1;
const PRELUDE: usize = 16;
/// The only header length versions 1 and 2 have: the archived `PieceHeader`.
pub const HEADER_LEN: usize = 64;

/// What a piece says about itself.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PieceHeader {
    /// Bytes of the original file.
    pub file_len: u64,
    /// Bytes of this piece's body.
    pub piece_len: u64,
    /// SHA-256 of the original file: names the file and checks the rebuild.
    pub file_sha256: [u8; 32],
    /// CRC-32C of the body.
    pub body_crc32c: u32,
    /// Format version.
    pub version: u16,
    /// 0 = Rabin, 1 = systematic.
    pub mode: u8,
    /// Pieces made.
    pub n: u8,
    /// Pieces needed.
    pub m: u8,
    /// This piece's index, `0..n`.
    pub index: u8,
}

/// One piece: header and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The header.
    pub header: PieceHeader,
    /// The body.
    pub body: Vec<u8>,
}

impl PieceHeader {
    /// The coding mode.
    pub fn mode(&self) -> Result<Mode, IdaError> {
        match self.mode {
            0 => Ok(Mode::Rabin),
            1 => Ok(Mode::Systematic),
            other => Err(IdaError::BadHeader(format!("unknown mode {other}"))),
        }
    }
}

fn mode_byte(mode: Mode) -> u8 {
    match mode {
        Mode::Rabin => 0,
        Mode::Systematic => 1,
    }
}

/// Where the body starts in a piece of the only header length there is: 16 + 64 bytes, already
/// a multiple of 16. The bytes a reader needs to check a header ([`read_header`]).
pub const BODY_AT: usize = (PRELUDE + HEADER_LEN).div_ceil(16) * 16;

impl PieceHeader {
    /// Everything a piece file holds before its body: magic, header length and CRC, the
    /// archived header, padding ([`BODY_AT`] bytes).
    pub fn prelude(&self) -> Vec<u8> {
        // Serializing a struct of plain integers cannot fail.
        let header = rkyv::to_bytes::<BoxedError>(self).unwrap_or_default();
        let body_at = (PRELUDE + header.len()).div_ceil(16) * 16;
        let mut out = Vec::with_capacity(body_at);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        let header_crc = if self.version == VERSION_1 {
            0
        } else {
            crc32c::crc32c(&header)
        };
        out.extend_from_slice(&header_crc.to_le_bytes());
        out.extend_from_slice(&header);
        out.resize(body_at, 0);
        out
    }
}

impl Piece {
    /// Serialize to the file format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header.prelude();
        out.extend_from_slice(&self.body);
        out
    }

    /// Parse and check a piece: the header as [`read_header`] does, then the body's length
    /// and CRC. Every failure is an error naming what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Piece, IdaError> {
        let (header, body_at) = read_header(bytes)?;
        let body = &bytes[body_at..];
        if body.len() as u64 != header.piece_len {
            return Err(IdaError::Truncated {
                index: header.index,
            });
        }
        if crc32c::crc32c(body) != header.body_crc32c {
            return Err(IdaError::CorruptBody {
                index: header.index,
            });
        }
        Ok(Piece {
            header,
            body: body.to_vec(),
        })
    }
}

/// Parse and check a piece's header from the first bytes of its file (at least [`BODY_AT`]
/// of them): magic, header length and CRC, the header (validated by rkyv before use),
/// version, fields. Its header and where its body starts; the body is not looked at.
pub fn read_header(bytes: &[u8]) -> Result<(PieceHeader, usize), IdaError> {
    if bytes.len() < PRELUDE || &bytes[..8] != MAGIC {
        return Err(IdaError::BadMagic);
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let hlen = word(8) as usize;
    let body_at = (PRELUDE + hlen).div_ceil(16) * 16;
    if hlen != HEADER_LEN {
        return Err(IdaError::BadHeader(format!(
            "header length {hlen}, not {HEADER_LEN}"
        )));
    }
    if bytes.len() < body_at {
        return Err(IdaError::BadHeader(
            "the file ends inside the header".into(),
        ));
    }
    let raw = &bytes[PRELUDE..PRELUDE + hlen];
    let stored_crc = word(12);
    let crc_ok = stored_crc == crc32c::crc32c(raw);
    if !crc_ok && stored_crc != 0 {
        return Err(IdaError::BadHeader("header CRC-32C mismatch".into()));
    }
    // rkyv reads in place from an aligned buffer; the header is small, so copy it.
    let mut aligned = AlignedVec::<16>::with_capacity(hlen);
    aligned.extend_from_slice(raw);
    let archived = rkyv::access::<ArchivedPieceHeader, BoxedError>(&aligned)
        .map_err(|e| IdaError::BadHeader(e.to_string()))?;
    let header: PieceHeader = rkyv::deserialize::<PieceHeader, BoxedError>(archived)
        .map_err(|e| IdaError::BadHeader(e.to_string()))?;
    match header.version {
        VERSION if crc_ok => {}
        // Zero where the CRC goes: only a version-1 piece has no header CRC.
        VERSION => return Err(IdaError::BadHeader("header CRC-32C mismatch".into())),
        VERSION_1 if stored_crc == 0 => {}
        VERSION_1 => return Err(IdaError::BadHeader("version 1 has no header CRC".into())),
        other => return Err(IdaError::BadVersion(other)),
    }
    header.mode()?;
    let (n, m) = (header.n as usize, header.m as usize);
    if !(1 <= m && m <= n) || header.index as usize >= n {
        return Err(IdaError::BadHeader(format!(
            "n = {n}, m = {m}, index = {}",
            header.index
        )));
    }
    if header.piece_len != header.file_len.div_ceil(m as u64) {
        return Err(IdaError::BadHeader(
            "piece length does not match file length and m".into(),
        ));
    }
    Ok((header, body_at))
}

impl Dispersal {
    /// Disperse `data` into `n` self-describing pieces.
    pub fn disperse(&self, data: &[u8]) -> Vec<Piece> {
        let sha: [u8; 32] = Sha256::digest(data).into();
        self.encode(data)
            .into_iter()
            .enumerate()
            .map(|(i, body)| Piece {
                header: self.header(i as u8, data.len() as u64, sha, crc32c::crc32c(&body)),
                body,
            })
            .collect()
    }

    /// The header of piece `index` of a `file_len`-byte file whose SHA-256 is `sha`, its body's
    /// CRC-32C being `body_crc32c`.
    pub fn header(&self, index: u8, file_len: u64, sha: [u8; 32], body_crc32c: u32) -> PieceHeader {
        PieceHeader {
            file_len,
            piece_len: file_len.div_ceil(self.m() as u64),
            file_sha256: sha,
            body_crc32c,
            version: VERSION,
            mode: mode_byte(self.mode()),
            n: self.n() as u8,
            m: self.m() as u8,
            index,
        }
    }
}

/// Rebuild a file from pieces, owned or borrowed (any `m` of one dispersal suffice; extra
/// ones are ignored).
/// Pieces of different files or dispersals, duplicates and too few pieces are errors; the
/// result's SHA-256 is checked, so the answer is the file or an error.
pub fn reconstruct<P: Borrow<Piece>>(pieces: &[P]) -> Result<Vec<u8>, IdaError> {
    let first = pieces
        .first()
        .ok_or(IdaError::TooFewPieces { have: 0, need: 1 })?;
    let h = &first.borrow().header;
    for p in pieces {
        let p = p.borrow();
        let q = &p.header;
        if q.file_sha256 != h.file_sha256 || q.file_len != h.file_len {
            return Err(IdaError::MixedFiles);
        }
        if (q.n, q.m, q.mode) != (h.n, h.m, h.mode) {
            return Err(IdaError::MixedParameters);
        }
        if crc32c::crc32c(&p.body) != q.body_crc32c {
            return Err(IdaError::CorruptBody { index: q.index });
        }
    }
    let d = Dispersal::new(h.n as usize, h.m as usize, h.mode()?)?;
    let given: Vec<(u8, &[u8])> = pieces
        .iter()
        .map(|p| (p.borrow().header.index, p.borrow().body.as_slice()))
        .collect();
    let out = d.decode(&given, h.file_len as usize)?;
    let sha: [u8; 32] = Sha256::digest(&out).into();
    if sha != h.file_sha256 {
        return Err(IdaError::FileChecksum);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Any corruption of one piece, anywhere in its bytes, gives an error or (for bytes
        /// nothing depends on, like padding) the exact data: never wrong data.
        #[test]
        fn corruption_never_yields_wrong_data(at in any::<u32>(), xor in 1u8..=255, which in 0usize..4, systematic in any::<bool>()) {
            let mode = if systematic { Mode::Systematic } else { Mode::Rabin };
            let data: Vec<u8> = (0..777u32).map(|i| (i * 13 + 5) as u8).collect();
            let pieces = Dispersal::new(6, 4, mode).unwrap().disperse(&data);
            let mut bytes = pieces[which].to_bytes();
            let at = at as usize % bytes.len();
            bytes[at] ^= xor;
            let result = Piece::from_bytes(&bytes).and_then(|p| {
                let mut set: Vec<Piece> = pieces[..4].to_vec();
                set[which] = p;
                reconstruct(&set)
            });
            if let Ok(out) = result {
                prop_assert_eq!(out, data);
            }
        }
    }

    fn sample() -> (Vec<u8>, Vec<Piece>) {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let d = Dispersal::new(7, 4, Mode::Systematic).unwrap();
        let pieces = d.disperse(&data);
        (data, pieces)
    }

    #[test]
    fn round_trip_through_bytes() {
        let (data, pieces) = sample();
        let parsed: Vec<Piece> = pieces
            .iter()
            .map(|p| Piece::from_bytes(&p.to_bytes()).unwrap())
            .collect();
        assert_eq!(parsed, pieces);
        assert_eq!(reconstruct(&parsed[3..]).unwrap(), data);
    }

    #[test]
    fn header_layout_is_as_documented() {
        let (_, pieces) = sample();
        let b = pieces[5].to_bytes();
        let h = &b[16..];
        assert_eq!(&b[..8], MAGIC);
        assert_eq!(u64::from_le_bytes(h[0..8].try_into().unwrap()), 1000);
        assert_eq!(u64::from_le_bytes(h[8..16].try_into().unwrap()), 250);
        assert_eq!(&h[16..48], &pieces[5].header.file_sha256);
        assert_eq!(
            u32::from_le_bytes(h[48..52].try_into().unwrap()),
            crc32c::crc32c(&pieces[5].body)
        );
        assert_eq!(u16::from_le_bytes(h[52..54].try_into().unwrap()), VERSION);
        assert_eq!(&h[54..58], &[1, 7, 4, 5]);
        let hlen = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        assert_eq!(hlen, 64);
        assert_eq!(&b[80..], pieces[5].body.as_slice());
    }

    /// A damaged header is caught by its own CRC before any field is believed: a flipped
    /// index would otherwise pass for another piece (and only the file checksum would catch
    /// it). A version-1 piece (no header CRC) still reads; the CRC is the documented one.
    #[test]
    fn the_header_has_its_own_checksum() {
        let (data, pieces) = sample();
        let good = pieces[6].to_bytes();
        assert_eq!(
            u32::from_le_bytes(good[12..16].try_into().unwrap()),
            crc32c::crc32c(&good[16..80])
        );
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        let mut b = good.clone();
        b[16 + 57] = 5; // index 6 -> 5
        assert_eq!(
            Piece::from_bytes(&b),
            Err(IdaError::BadHeader("header CRC-32C mismatch".into()))
        );
        // Zero where the CRC goes, on a version-2 header: refused, not read as version 1.
        let mut b = good.clone();
        b[12..16].fill(0);
        assert!(matches!(Piece::from_bytes(&b), Err(IdaError::BadHeader(_))));
        // Another header length.
        let mut b = good.clone();
        b[8] = 65;
        assert!(matches!(Piece::from_bytes(&b), Err(IdaError::BadHeader(_))));
        // Version 1, as weft wrote it before the header CRC.
        let old: Vec<Piece> = pieces
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.header.version = 1;
                p
            })
            .collect();
        let bytes = old[2].to_bytes();
        assert_eq!(&bytes[12..16], &[0; 4]);
        let parsed: Vec<Piece> = old
            .iter()
            .map(|p| Piece::from_bytes(&p.to_bytes()).unwrap())
            .collect();
        assert_eq!(reconstruct(&parsed[..4]).unwrap(), data);
    }

    #[test]
    fn every_defect_has_its_own_error() {
        let (_, pieces) = sample();
        let good = pieces[6].to_bytes();
        // Bad magic.
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(Piece::from_bytes(&b), Err(IdaError::BadMagic));
        // Truncated.
        assert_eq!(
            Piece::from_bytes(&good[..good.len() - 1]),
            Err(IdaError::Truncated { index: 6 })
        );
        assert!(Piece::from_bytes(&good[..20]).is_err());
        // Corrupt body.
        let mut b = good.clone();
        *b.last_mut().unwrap() ^= 1;
        assert_eq!(
            Piece::from_bytes(&b),
            Err(IdaError::CorruptBody { index: 6 })
        );
        // Wrong version.
        let mut p = pieces[6].clone();
        p.header.version = 9;
        assert_eq!(
            Piece::from_bytes(&p.to_bytes()),
            Err(IdaError::BadVersion(9))
        );
        // Nonsense fields.
        let mut p = pieces[6].clone();
        p.header.index = 7;
        assert!(matches!(
            Piece::from_bytes(&p.to_bytes()),
            Err(IdaError::BadHeader(_))
        ));
        // Another file's piece.
        let other = Dispersal::new(7, 4, Mode::Systematic)
            .unwrap()
            .disperse(b"another file");
        let mixed = vec![
            pieces[0].clone(),
            pieces[1].clone(),
            pieces[2].clone(),
            other[3].clone(),
        ];
        assert_eq!(reconstruct(&mixed), Err(IdaError::MixedFiles));
        // Duplicates and too few.
        let dup = vec![
            pieces[0].clone(),
            pieces[0].clone(),
            pieces[1].clone(),
            pieces[2].clone(),
        ];
        assert_eq!(reconstruct(&dup), Err(IdaError::DuplicateIndex(0)));
        assert_eq!(
            reconstruct(&pieces[..3]),
            Err(IdaError::TooFewPieces { have: 3, need: 4 })
        );
        // Mismatched parameters.
        let mut p = pieces[3].clone();
        p.header.m = 3;
        let mixed = vec![pieces[0].clone(), pieces[1].clone(), pieces[2].clone(), p];
        assert_eq!(reconstruct(&mixed), Err(IdaError::MixedParameters));
        // A body altered consistently with its CRC is still caught by the file checksum.
        let mut p = pieces[4].clone();
        p.body[0] ^= 0xff;
        p.header.body_crc32c = crc32c::crc32c(&p.body);
        let tampered = vec![pieces[0].clone(), pieces[1].clone(), pieces[2].clone(), p];
        assert_eq!(reconstruct(&tampered), Err(IdaError::FileChecksum));
    }
}
