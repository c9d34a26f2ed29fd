//! Files dispersed and rebuilt in bounded memory, whatever their size.
//!
//! The piece format ([`super::piece`]) holds chunk `j` of the file (bytes `j·L .. (j+1)·L`)
//! behind piece `j`'s header in systematic mode, and every piece's byte `k` depends on byte `k`
//! of each chunk alone, so the coding runs over columns: `B` bytes at offset `k` of every chunk
//! (`m` positioned reads of the file) make `B` bytes at offset `k` of every piece (`n`
//! sequential writes), and a rebuild runs the other way. A reading thread fetches the next
//! columns while the current ones are coded and written, so reading, coding and writing
//! overlap; each side holds two sets of `m + n` blocks.
//!
//! **The bound.** `B` = [`block_len`]`(m, n)`: 1 MiB per block, less when `m + n` is large,
//! so the blocks never take more than [`BLOCK_MEMORY`] (64 MiB) per set, 128 MiB in all, plus
//! one [`HASH_BLOCK`] for the SHA-256: a 100 GiB file takes what a 100 MiB one does.
//!
//! **Integrity.** A piece's header (written last, in its place) needs the file's SHA-256,
//! computed by a thread of its own that reads the file in order while the coding reads it by
//! columns, and the body's CRC-32C, summed as the body is written. A rebuild sums each piece's
//! CRC as it reads it (a piece that fails is named, and the caller tries another subset) and
//! checks the rebuilt file's SHA-256 by reading it back, before it takes the file's name: the
//! answer is the file or an error, never wrong bytes under the asked-for name.

use super::piece::{PieceHeader, BODY_AT};
use super::{Dispersal, IdaError, Mode};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Most bytes one set of blocks (`m + n` of them) may take.
pub const BLOCK_MEMORY: usize = 64 << 20;

/// Largest block: a column this long of every chunk is read at once.
pub const MAX_BLOCK: usize = 1 << 20;

/// Smallest block, whatever `m + n`: positioned reads shorter than this cost more in calls
/// than they save in memory.
pub const MIN_BLOCK: usize = 64 << 10;

/// The SHA-256 thread's read size.
pub const HASH_BLOCK: usize = 1 << 20;

/// Bytes per block for a dispersal of `m` of `n`: [`MAX_BLOCK`], or less so that `m + n` of
/// them fit in [`BLOCK_MEMORY`] (a multiple of 64, what the SIMD kernels work in).
pub fn block_len(m: usize, n: usize) -> usize {
    (BLOCK_MEMORY / (m + n).max(1) / 64 * 64).clamp(MIN_BLOCK, MAX_BLOCK)
}

/// What went wrong with which file.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// A file could not be read or written.
    #[error("{}: {err}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error (in the message, so not a `source` printed twice).
        err: std::io::Error,
    },
    /// A piece or the rebuilt file did not check: which and why.
    #[error("{}: {err}", path.display())]
    Piece {
        /// The piece, or the file rebuilt.
        path: PathBuf,
        /// Why.
        err: IdaError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StreamError + '_ {
    move |err| StreamError::Io {
        path: path.to_path_buf(),
        err,
    }
}

/// A set of blocks on its way between the reading thread and the coder.
struct Blocks {
    /// Column offset of this set, bytes into every chunk or piece body.
    at: u64,
    /// Valid bytes in each block (the last set is shorter).
    len: usize,
    bufs: Vec<Vec<u8>>,
}

/// Two sets of `count` blocks of `b` bytes circulate between a reading thread, which fills
/// each with `fill` (column offset, valid bytes, the blocks) for the offsets `0, b, 2b, …`
/// below `total`, and the caller, who takes them in order and hands them back.
struct Columns {
    full: Receiver<Result<Blocks, StreamError>>,
    empty: SyncSender<Blocks>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Columns {
    fn start(
        total: u64,
        b: usize,
        count: usize,
        mut fill: impl FnMut(u64, usize, &mut [Vec<u8>]) -> Result<(), StreamError> + Send + 'static,
    ) -> Self {
        let (full_tx, full) = sync_channel::<Result<Blocks, StreamError>>(2);
        let (empty, empty_rx) = sync_channel::<Blocks>(2);
        for _ in 0..2 {
            let bufs = (0..count).map(|_| vec![0u8; b]).collect();
            let _ = empty.send(Blocks {
                at: 0,
                len: 0,
                bufs,
            });
        }
        let reader = std::thread::Builder::new()
            .name("weft-ida-read".into())
            .spawn(move || {
                let mut at = 0u64;
                while at < total {
                    let Ok(mut set) = empty_rx.recv() else {
                        return;
                    };
                    let len = (total - at).min(b as u64) as usize;
                    let r = fill(at, len, &mut set.bufs).map(|()| {
                        set.at = at;
                        set.len = len;
                        set
                    });
                    let failed = r.is_err();
                    if full_tx.send(r).is_err() || failed {
                        return;
                    }
                    at += len as u64;
                }
            })
            .ok();
        Columns {
            full,
            empty,
            reader,
        }
    }

    /// The next filled set, `None` after the last.
    fn next(&self) -> Option<Result<Blocks, StreamError>> {
        self.full.recv().ok()
    }

    fn give_back(&self, set: Blocks) {
        let _ = self.empty.send(set);
    }
}

impl Drop for Columns {
    fn drop(&mut self) {
        // Only two sets circulate and the full channel holds two, so the reader never waits
        // to hand one over; it may wait for an empty one, which dropping its sender ends.
        drop(std::mem::replace(&mut self.empty, sync_channel(0).0));
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Read `buf.len()` bytes of `f` at `at`, zeros past its end (the last chunk's padding).
fn read_padded(f: &File, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(())
}

/// A dispersal written.
#[derive(Clone, Debug)]
pub struct Dispersed {
    /// Bytes of the file.
    pub file_len: u64,
    /// Bytes of each piece's body.
    pub piece_len: u64,
    /// The file's SHA-256.
    pub sha256: [u8; 32],
}

/// Disperse the file at `input` with `d` into `pieces` (one writable file per piece, in index
/// order, written from their start): in bounded memory ([`block_len`]), the file read by
/// columns for the coding and in order for its SHA-256 at the same time.
pub fn disperse_file(
    d: &Dispersal,
    input: &Path,
    pieces: &[(PathBuf, File)],
) -> Result<Dispersed, StreamError> {
    let (n, m) = (d.n(), d.m());
    assert_eq!(pieces.len(), n, "one file per piece");
    let file = File::open(input).map_err(io(input))?;
    let file_len = file.metadata().map_err(io(input))?.len();
    let l = file_len.div_ceil(m as u64);
    // The file in order, for its SHA-256.
    let hashed = {
        let mut f = File::open(input).map_err(io(input))?;
        let path = input.to_path_buf();
        std::thread::Builder::new()
            .name("weft-ida-sha".into())
            .spawn(move || -> Result<[u8; 32], StreamError> {
                let mut h = Sha256::new();
                let mut buf = vec![0u8; HASH_BLOCK];
                loop {
                    let got = f.read(&mut buf).map_err(io(&path))?;
                    if got == 0 {
                        return Ok(h.finalize().into());
                    }
                    h.update(&buf[..got]);
                }
            })
            .map_err(io(input))?
    };
    // Bodies start after room for the header, written at the end.
    for (path, f) in pieces {
        f.write_all_at(&[0u8; BODY_AT], 0).map_err(io(path))?;
    }
    let b = block_len(m, n);
    let src = input.to_path_buf();
    let columns = Columns::start(l, b, m, move |at, len, bufs| {
        for (j, buf) in bufs.iter_mut().enumerate() {
            read_padded(&file, j as u64 * l + at, &mut buf[..len]).map_err(io(&src))?;
        }
        Ok(())
    });
    let coded = match d.mode() {
        Mode::Rabin => n,
        Mode::Systematic => n - m,
    };
    let mut out: Vec<Vec<u8>> = (0..coded).map(|_| vec![0u8; b]).collect();
    let mut crc = vec![0u32; n];
    while let Some(set) = columns.next() {
        let set = set?;
        let len = set.len;
        {
            let chunks: Vec<&[u8]> = set.bufs.iter().map(|c| &c[..len]).collect();
            let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| &mut o[..len]).collect();
            d.encode_rows(&chunks, &mut outs);
        }
        let rows = set.bufs.iter().take(n - coded).chain(out.iter());
        for (i, row) in rows.enumerate() {
            let (path, f) = &pieces[i];
            let body = &row[..len];
            f.write_all_at(body, BODY_AT as u64 + set.at)
                .map_err(io(path))?;
            crc[i] = crc32c::crc32c_append(crc[i], body);
        }
        columns.give_back(set);
    }
    drop(columns);
    let sha256 = hashed
        .join()
        .map_err(|_| io(input)(std::io::Error::other("the hashing thread panicked")))??;
    for (i, (path, f)) in pieces.iter().enumerate() {
        let header = d.header(i as u8, file_len, sha256, crc[i]);
        f.write_all_at(&header.prelude(), 0).map_err(io(path))?;
        f.set_len(BODY_AT as u64 + l).map_err(io(path))?;
    }
    Ok(Dispersed {
        file_len,
        piece_len: l,
        sha256,
    })
}

/// One piece a rebuild reads: its file, its header and where its body starts.
#[derive(Clone, Debug)]
pub struct PieceFile {
    /// The file.
    pub path: PathBuf,
    /// Its header (checked).
    pub header: PieceHeader,
    /// Where its body starts.
    pub body_at: u64,
}

/// Rebuild into `out` (a new file, written from its start) the file whose `m` pieces of
/// distinct indices are `pieces`, all of one dispersal: in bounded memory, each piece's body
/// checked against its CRC-32C as it is read and the result against the file's SHA-256. A
/// piece that fails its CRC is named (another subset may do); a result that fails the SHA-256
/// is [`IdaError::FileChecksum`].
pub fn decode_file(pieces: &[PieceFile], out: (&Path, &File)) -> Result<u64, StreamError> {
    let first = pieces.first().ok_or_else(|| StreamError::Piece {
        path: out.0.to_path_buf(),
        err: IdaError::TooFewPieces { have: 0, need: 1 },
    })?;
    let h = first.header.clone();
    let (n, m) = (h.n as usize, h.m as usize);
    let piece_err = |p: &PieceFile, err| StreamError::Piece {
        path: p.path.clone(),
        err,
    };
    let d = Dispersal::new(n, m, h.mode().map_err(|e| piece_err(first, e))?)
        .map_err(|e| piece_err(first, e))?;
    let mut chosen: Vec<&PieceFile> = pieces.iter().collect();
    chosen.sort_by_key(|p| p.header.index);
    let indices: Vec<u8> = chosen.iter().map(|p| p.header.index).collect();
    if chosen.len() != m || indices.windows(2).any(|w| w[0] == w[1]) {
        return Err(piece_err(
            first,
            IdaError::TooFewPieces {
                have: chosen.len(),
                need: m,
            },
        ));
    }
    let rebuilt = d.rebuilt_chunks(&indices);
    let (l, file_len) = (h.piece_len, h.file_len);
    let files: Vec<File> = chosen
        .iter()
        .map(|p| File::open(&p.path).map_err(io(&p.path)))
        .collect::<Result<_, _>>()?;
    let at: Vec<(PathBuf, u64)> = chosen.iter().map(|p| (p.path.clone(), p.body_at)).collect();
    let b = block_len(m, n);
    let mut crc = vec![0u32; m];
    let (crc_tx, crc_rx) = sync_channel::<Vec<u32>>(1);
    let columns = Columns::start(l, b, m, move |off, len, bufs| {
        for (k, buf) in bufs.iter_mut().enumerate() {
            let (path, body_at) = &at[k];
            let want = &mut buf[..len];
            files[k]
                .read_exact_at(want, body_at + off)
                .map_err(io(path))?;
            crc[k] = crc32c::crc32c_append(crc[k], want);
        }
        if off + len as u64 >= l {
            let _ = crc_tx.send(std::mem::take(&mut crc));
        }
        Ok(())
    });
    let mut missing: Vec<Vec<u8>> = rebuilt.iter().map(|_| vec![0u8; b]).collect();
    let (out_path, out_file) = out;
    while let Some(set) = columns.next() {
        let set = set?;
        let len = set.len;
        let given: Vec<(u8, &[u8])> = indices
            .iter()
            .zip(&set.bufs)
            .map(|(&i, buf)| (i, &buf[..len]))
            .collect();
        let mut outs: Vec<Vec<u8>> = std::mem::take(&mut missing);
        for o in &mut outs {
            o.truncate(len);
        }
        d.decode_rows(&given, &mut outs)
            .map_err(|e| piece_err(first, e))?;
        for (j, chunk_at) in (0..m as u64).map(|j| (j as usize, j * l + set.at)) {
            if chunk_at >= file_len {
                break;
            }
            let src: &[u8] = match rebuilt.iter().position(|&r| r == j) {
                Some(r) => &outs[r],
                // A systematic data piece that survived is chunk `j` itself.
                None => given[indices.iter().position(|&i| i as usize == j).unwrap_or(0)].1,
            };
            let keep = ((file_len - chunk_at) as usize).min(len);
            out_file
                .write_all_at(&src[..keep], chunk_at)
                .map_err(io(out_path))?;
        }
        for o in &mut outs {
            o.resize(b, 0);
        }
        missing = outs;
        columns.give_back(set);
    }
    drop(columns);
    let sums = if l == 0 {
        vec![0; m]
    } else {
        crc_rx.recv().unwrap_or_default()
    };
    for (k, p) in chosen.iter().enumerate() {
        if sums.get(k) != Some(&p.header.body_crc32c) {
            return Err(piece_err(
                p,
                IdaError::CorruptBody {
                    index: p.header.index,
                },
            ));
        }
    }
    out_file.set_len(file_len).map_err(io(out_path))?;
    // The result, read back in order, against the file's SHA-256.
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; HASH_BLOCK];
    let mut at = 0u64;
    while at < file_len {
        let want = (file_len - at).min(HASH_BLOCK as u64) as usize;
        out_file
            .read_exact_at(&mut buf[..want], at)
            .map_err(io(out_path))?;
        sha.update(&buf[..want]);
        at += want as u64;
    }
    if <[u8; 32]>::from(sha.finalize()) != h.file_sha256 {
        return Err(StreamError::Piece {
            path: out_path.to_path_buf(),
            err: IdaError::FileChecksum,
        });
    }
    Ok(file_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ida::piece::read_header;
    use crate::rng::SimRng;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("weft-stream-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut r = SimRng::new(seed);
        (0..len).map(|_| r.next_u64() as u8).collect()
    }

    fn disperse_to(d: &Dispersal, input: &Path, dir: &Path) -> Vec<PathBuf> {
        let pieces: Vec<(PathBuf, File)> = (0..d.n())
            .map(|i| {
                let p = dir.join(format!("piece-{i:03}"));
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&p)
                    .unwrap();
                (p, f)
            })
            .collect();
        disperse_file(d, input, &pieces).unwrap();
        pieces.into_iter().map(|(p, _)| p).collect()
    }

    fn piece_file(path: &Path) -> PieceFile {
        let bytes = std::fs::read(path).unwrap();
        let (header, body_at) = read_header(&bytes).unwrap();
        PieceFile {
            path: path.to_path_buf(),
            header,
            body_at: body_at as u64,
        }
    }

    /// Streamed pieces are byte for byte the in-memory dispersal's, for lengths around the
    /// block and chunk boundaries, and any `m` of them stream back to the file.
    #[test]
    fn streamed_pieces_equal_the_in_memory_ones_and_stream_back() {
        let dir = scratch("roundtrip");
        for (n, m, mode) in [
            (5, 3, Mode::Systematic),
            (4, 2, Mode::Rabin),
            (3, 1, Mode::Rabin),
        ] {
            let d = Dispersal::new(n, m, mode).unwrap();
            let b = block_len(m, n);
            for len in [0, 1, 63, b - 1, b * m + 7, 3 * b * m] {
                let data = bytes(len as u64, len);
                let input = dir.join("input");
                std::fs::write(&input, &data).unwrap();
                let paths = disperse_to(&d, &input, &dir);
                for (p, want) in paths.iter().zip(d.disperse(&data)) {
                    assert_eq!(std::fs::read(p).unwrap(), want.to_bytes(), "{mode} {len}");
                }
                // The last m pieces (parity first in systematic mode).
                let chosen: Vec<PieceFile> = paths[n - m..].iter().map(|p| piece_file(p)).collect();
                let out = dir.join("out");
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&out)
                    .unwrap();
                assert_eq!(decode_file(&chosen, (&out, &f)).unwrap(), len as u64);
                assert_eq!(std::fs::read(&out).unwrap(), data, "{mode} {len}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A body damaged after its header was written is named by its CRC, and a piece altered
    /// with a matching CRC makes the result fail its SHA-256: never wrong bytes.
    #[test]
    fn a_damaged_body_is_named_and_an_altered_one_fails_the_file_hash() {
        let dir = scratch("damage");
        let d = Dispersal::new(4, 2, Mode::Systematic).unwrap();
        let data = bytes(9, 3 * block_len(2, 4) + 5);
        let input = dir.join("input");
        std::fs::write(&input, &data).unwrap();
        let paths = disperse_to(&d, &input, &dir);
        let out = dir.join("out");
        let open_out = || {
            File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&out)
                .unwrap()
        };
        // One byte of piece 2's body flipped: its CRC names it.
        let mut raw = std::fs::read(&paths[2]).unwrap();
        raw[BODY_AT + 100] ^= 1;
        std::fs::write(&paths[2], &raw).unwrap();
        let chosen = vec![piece_file(&paths[0]), piece_file(&paths[2])];
        match decode_file(&chosen, (&out, &open_out())) {
            Err(StreamError::Piece {
                path,
                err: IdaError::CorruptBody { index: 2 },
            }) => {
                assert_eq!(path, paths[2])
            }
            other => panic!("{other:?}"),
        }
        // The same flip with the header's CRC made to match: the file's SHA-256 catches it.
        let mut body_crc = crc32c::crc32c(&raw[BODY_AT..]);
        let mut p = piece_file(&paths[2]);
        std::mem::swap(&mut p.header.body_crc32c, &mut body_crc);
        match decode_file(&[piece_file(&paths[0]), p], (&out, &open_out())) {
            Err(StreamError::Piece {
                err: IdaError::FileChecksum,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn blocks_stay_within_the_bound() {
        for (m, n) in [(1, 1), (10, 14), (128, 255), (255, 255)] {
            let b = block_len(m, n);
            assert!((MIN_BLOCK..=MAX_BLOCK).contains(&b) && b.is_multiple_of(64));
            assert!((m + n) * b <= BLOCK_MEMORY.max((m + n) * MIN_BLOCK));
        }
    }
}
