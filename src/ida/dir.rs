//! Piece directories as users leave them. A rebuild finds one file's pieces among whatever
//! else lies in the directory (damaged pieces, copies under other names, pieces of other files
//! or of older dispersals, subdirectories, junk), names every file it passed over and why,
//! and tries other subsets of pieces when a rebuilt file fails its SHA-256. A dispersal never
//! leaves its pieces mixed with another's.
//!
//! Nothing here holds a piece's body: a scan reads each header and streams the body through
//! its CRC-32C, and rebuilds and dispersals stream ([`super::stream`]), so a directory of
//! pieces of a file larger than memory is handled in bounded memory.

use super::piece::{read_header, PieceHeader, BODY_AT, MAGIC};
use super::stream::{self, PieceFile, StreamError};
use super::{Dispersal, IdaError, Mode, Piece};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Subsets of `m` pieces a rebuild tries before it gives up: each decodes the whole file, and
/// a piece that passes both its CRCs yet is wrong was altered on purpose, so more tries only
/// help against a few such pieces.
pub const MAX_SUBSETS: usize = 64;

/// Why a directory gave no file.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// The directory or a piece could not be read or written.
    #[error("{}: {err}", path.display())]
    Io {
        /// What was being read or written.
        path: PathBuf,
        /// The error (in the message, so not a `source` printed twice).
        err: std::io::Error,
    },
    /// Not one valid piece.
    #[error("0 valid pieces in {}, at least 1 needed", .0.display())]
    NoPieces(PathBuf),
    /// No file has enough pieces: the closest is named.
    #[error("too few pieces: {0}")]
    TooFew(String),
    /// Several files can be rebuilt from what lies there.
    #[error(
        "pieces of {} files lie there, each complete: {}; name one with --file-sha",
        .0.len(),
        .0.join("; ")
    )]
    Ambiguous(Vec<String>),
    /// `--file-sha` matches no file, or more than one.
    #[error("no single file's SHA-256 starts with {want}: {files}")]
    NoSuchFile {
        /// The prefix asked for.
        want: String,
        /// The files there are.
        files: String,
    },
    /// Every subset tried rebuilt something that fails the file's SHA-256.
    #[error(
        "{tried} subsets of {m} pieces each rebuilt bytes that fail the file's SHA-256: \
         pieces were altered (with their CRCs)"
    )]
    Altered {
        /// Subsets tried.
        tried: usize,
        /// Pieces per subset.
        m: usize,
    },
    /// The output of a rebuild is one of the files it reads.
    #[error("{}: the output is one of the files the rebuild reads; write it elsewhere", .0.display())]
    OutputIsInput(PathBuf),
    /// `disperse` into a directory that already holds pieces.
    #[error(
        "{} already holds {} piece file(s) ({}); choose an empty directory, or replace an \
         earlier dispersal of the same file (pieces of other files stay)",
        dir.display(),
        paths.len(),
        list(paths)
    )]
    HoldsPieces {
        /// The directory.
        dir: PathBuf,
        /// The pieces found there.
        paths: Vec<PathBuf>,
    },
    /// The new pieces' names are held by pieces of another file, which a dispersal never
    /// replaces.
    #[error(
        "{}: {} ({}) hold(s) pieces of another file under the names the new pieces take; \
         disperse into another directory, or move them",
        dir.display(),
        paths.len(),
        list(paths)
    )]
    NamesTaken {
        /// The directory.
        dir: PathBuf,
        /// The files whose names are taken.
        paths: Vec<PathBuf>,
    },
}

/// A path's last component, as text: how pieces are named to the user.
pub fn name_of(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn list(paths: &[PathBuf]) -> String {
    let mut names: Vec<String> = paths.iter().take(4).map(|p| name_of(p)).collect();
    if paths.len() > 4 {
        names.push(format!("and {} more", paths.len() - 4));
    }
    names.join(", ")
}

/// A file passed over, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

/// A valid piece (header checked, body's CRC-32C checked) and where it lies.
#[derive(Clone, Debug)]
pub struct Found {
    /// Its file.
    pub path: PathBuf,
    /// Its header.
    pub header: PieceHeader,
    /// Where its body starts in the file.
    pub body_at: u64,
}

/// What a directory holds.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The directory.
    pub dir: PathBuf,
    /// Valid pieces, by file name.
    pub pieces: Vec<Found>,
    /// Everything else, with the reason.
    pub skipped: Vec<Skipped>,
}

/// A rebuilt file.
#[derive(Clone, Debug)]
pub struct Rebuilt {
    /// Its length, bytes (the file's SHA-256 checked).
    pub len: u64,
    /// The `m` pieces it came from.
    pub used: Vec<PathBuf>,
    /// Valid pieces passed over: other files, other dispersals, copies.
    pub skipped: Vec<Skipped>,
    /// Valid pieces of the same dispersal that were not needed.
    pub spare: usize,
    /// Subsets of `m` pieces decoded (1 unless pieces were altered).
    pub subsets_tried: usize,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DirError + '_ {
    move |err| DirError::Io {
        path: path.to_path_buf(),
        err,
    }
}

/// Read every entry of `dir` (not its subdirectories): valid pieces, and the rest with why.
pub fn scan(dir: &Path) -> Result<Scan, DirError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io(dir)))
        .collect::<Result<_, _>>()?;
    paths.sort();
    let mut scan = Scan {
        dir: dir.to_path_buf(),
        ..Scan::default()
    };
    for path in paths {
        let why = match std::fs::metadata(&path) {
            Err(e) => format!("unreadable: {e}"),
            Ok(m) if m.is_dir() => "a directory (not searched)".into(),
            Ok(m) if !m.is_file() => "not a regular file".into(),
            Ok(m) => match check(&path, m.len()) {
                Ok(Ok(found)) => {
                    scan.pieces.push(found);
                    continue;
                }
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("unreadable: {e}"),
            },
        };
        scan.skipped.push(Skipped { path, why });
    }
    Ok(scan)
}

/// Check the file at `path` (`len` bytes) as a piece: its header, its length, and its body
/// against the header's CRC-32C, read in blocks. An I/O error, or what is wrong with it.
fn check(path: &Path, len: u64) -> std::io::Result<Result<Found, IdaError>> {
    let f = File::open(path)?;
    let mut head = vec![0u8; BODY_AT.min(len as usize)];
    f.read_exact_at(&mut head, 0)?;
    let (header, body_at) = match read_header(&head) {
        Ok(h) => h,
        Err(e) => return Ok(Err(e)),
    };
    let body_at = body_at as u64;
    if len != body_at + header.piece_len {
        return Ok(Err(IdaError::Truncated {
            index: header.index,
        }));
    }
    let mut crc = 0u32;
    let mut buf = vec![0u8; stream::HASH_BLOCK];
    let mut at = body_at;
    while at < len {
        let want = (len - at).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..want], at)?;
        crc = crc32c::crc32c_append(crc, &buf[..want]);
        at += want as u64;
    }
    if crc != header.body_crc32c {
        return Ok(Err(IdaError::CorruptBody {
            index: header.index,
        }));
    }
    Ok(Ok(Found {
        path: path.to_path_buf(),
        header,
        body_at,
    }))
}

impl Scan {
    /// `out` may not be a file the scan read (a piece, or anything else in the directory):
    /// the rebuilt file would take its place.
    fn refuse_an_input_as(&self, out: &Path) -> Result<(), DirError> {
        use std::os::unix::fs::MetadataExt;
        let Ok(o) = std::fs::metadata(out) else {
            return Ok(()); // nothing there yet
        };
        let inputs = self.pieces.iter().map(|f| &f.path);
        let read = inputs.chain(self.skipped.iter().map(|s| &s.path));
        for path in read {
            if std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (o.dev(), o.ino())) {
                return Err(DirError::OutputIsInput(out.to_path_buf()));
            }
        }
        Ok(())
    }
}

/// A dispersal's parameters as pieces carry them: n, m, mode byte.
type Params = (u8, u8, u8);

/// The pieces of one file (same SHA-256 and length).
struct FileGroup<'a> {
    sha: [u8; 32],
    len: u64,
    /// By dispersal parameters (n, m, mode byte).
    dispersals: BTreeMap<Params, Vec<&'a Found>>,
}

impl FileGroup<'_> {
    fn name(&self) -> String {
        format!("{} ({} bytes)", hex8(&self.sha), self.len)
    }

    /// Distinct indices of the dispersal with the most, and its `m`.
    fn best(&self) -> (usize, usize) {
        self.dispersals
            .iter()
            .map(|(&(_, m, _), v)| (distinct_indices(v), m as usize))
            .max_by_key(|&(have, m)| (have >= m, have as i64 - m as i64))
            .unwrap_or((0, 1))
    }

    fn complete(&self) -> bool {
        let (have, m) = self.best();
        have >= m
    }
}

fn hex8(sha: &[u8; 32]) -> String {
    sha[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        + "…"
}

fn hex(sha: &[u8; 32]) -> String {
    sha.iter().map(|b| format!("{b:02x}")).collect()
}

fn distinct_indices(v: &[&Found]) -> usize {
    let mut seen = [false; 256];
    v.iter()
        .filter(|f| !std::mem::replace(&mut seen[f.header.index as usize], true))
        .count()
}

fn mode_name(mode: u8) -> Mode {
    match mode {
        0 => Mode::Rabin,
        _ => Mode::Systematic,
    }
}

impl Scan {
    /// Rebuild into `out` the one file the directory holds enough pieces of (or the one whose
    /// SHA-256 starts with `want`, hex). Only valid pieces take part; a subset whose result
    /// fails the SHA-256 (or a piece changed since the scan) is replaced by another, up to
    /// [`MAX_SUBSETS`]. The result is written beside `out` under a hidden name and takes
    /// `out`'s name only once it is checked.
    pub fn rebuild(&self, want: Option<&str>, out: &Path) -> Result<Rebuilt, DirError> {
        if self.pieces.is_empty() {
            return Err(DirError::NoPieces(self.dir.clone()));
        }
        self.refuse_an_input_as(out)?;
        let mut files: Vec<FileGroup> = Vec::new();
        for f in &self.pieces {
            let h = &f.header;
            let at = match files
                .iter()
                .position(|g| g.sha == h.file_sha256 && g.len == h.file_len)
            {
                Some(at) => at,
                None => {
                    files.push(FileGroup {
                        sha: h.file_sha256,
                        len: h.file_len,
                        dispersals: BTreeMap::new(),
                    });
                    files.len() - 1
                }
            };
            files[at]
                .dispersals
                .entry((h.n, h.m, h.mode))
                .or_default()
                .push(f);
        }
        let chosen = choose(&files, want)?;
        let file = &files[chosen];
        let mut skipped: Vec<Skipped> = files
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != chosen)
            .flat_map(|(_, g)| {
                let why = format!("a piece of another file, {}", g.name());
                g.dispersals.values().flatten().map(move |f| Skipped {
                    path: f.path.clone(),
                    why: why.clone(),
                })
            })
            .collect();
        // The dispersals of the chosen file, the one with the most spare pieces first.
        let mut order: Vec<(&Params, &Vec<&Found>)> = file.dispersals.iter().collect();
        order.sort_by_key(|(k, v)| std::cmp::Reverse(distinct_indices(v) as i64 - k.1 as i64));
        let mut tried = 0;
        let mut last_m = 0;
        for &(&(n, m, mode), found) in &order {
            let m = m as usize;
            last_m = m;
            let (candidates, copies) = dedup(found);
            if distinct_indices(&candidates) < m {
                continue;
            }
            let mut result = None;
            let mut io_error = None;
            let partial = Partial::beside(out);
            each_subset(&candidates, m, &mut |subset| {
                tried += 1;
                let pieces: Vec<PieceFile> = subset
                    .iter()
                    .map(|f| PieceFile {
                        path: f.path.clone(),
                        header: f.header.clone(),
                        body_at: f.body_at,
                    })
                    .collect();
                let attempt = partial
                    .create()
                    .and_then(|file| stream::decode_file(&pieces, (&partial.path, &file)));
                match attempt {
                    Ok(len) => {
                        result = Some((len, subset.iter().map(|f| f.path.clone()).collect()));
                        false
                    }
                    Err(StreamError::Io { path, err }) => {
                        io_error = Some(DirError::Io { path, err });
                        false
                    }
                    Err(StreamError::Piece { .. }) => tried < MAX_SUBSETS,
                }
            });
            if let Some(e) = io_error {
                return Err(e);
            }
            let Some((len, used)) = result else {
                if tried >= MAX_SUBSETS {
                    break;
                }
                continue;
            };
            partial.commit(out)?;
            skipped.extend(copies);
            for &(&(n2, m2, mode2), others) in
                order.iter().filter(|(k, _)| **k != (n, m as u8, mode))
            {
                for f in others {
                    skipped.push(Skipped {
                        path: f.path.clone(),
                        why: format!(
                            "of another dispersal of this file (n = {n2}, m = {m2}, {}), not needed",
                            mode_name(mode2)
                        ),
                    });
                }
            }
            skipped.sort_by(|a, b| a.path.cmp(&b.path));
            return Ok(Rebuilt {
                spare: candidates.len() - m,
                len,
                used,
                skipped,
                subsets_tried: tried,
            });
        }
        Err(DirError::Altered { tried, m: last_m })
    }
}

/// The file to rebuild: the one `want` names, else the only complete one.
fn choose(files: &[FileGroup], want: Option<&str>) -> Result<usize, DirError> {
    let names = || {
        files
            .iter()
            .map(|g| g.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(want) = want {
        let want = want.to_ascii_lowercase();
        let hits: Vec<usize> = (0..files.len())
            .filter(|&i| hex(&files[i].sha).starts_with(&want))
            .collect();
        return match hits[..] {
            [one] if files[one].complete() => Ok(one),
            [one] => Err(too_few(&files[one])),
            _ => Err(DirError::NoSuchFile {
                want,
                files: names(),
            }),
        };
    }
    let complete: Vec<usize> = (0..files.len()).filter(|&i| files[i].complete()).collect();
    match complete[..] {
        [one] => Ok(one),
        [] => {
            let closest = files
                .iter()
                .max_by(|a, b| {
                    let (ha, ma) = a.best();
                    let (hb, mb) = b.best();
                    (ha as f64 / ma as f64).total_cmp(&(hb as f64 / mb as f64))
                })
                .expect("at least one file");
            Err(too_few(closest))
        }
        _ => Err(DirError::Ambiguous(
            complete
                .iter()
                .map(|&i| {
                    let (have, m) = files[i].best();
                    format!("{} from {have} pieces ({m} needed)", files[i].name())
                })
                .collect(),
        )),
    }
}

fn too_few(g: &FileGroup) -> DirError {
    let (have, m) = g.best();
    DirError::TooFew(format!(
        "file {} has {have} distinct valid piece(s), {m} needed",
        g.name()
    ))
}

/// One piece per distinct (index, body); the copies, each named with what it copies.
fn dedup<'a>(found: &[&'a Found]) -> (Vec<&'a Found>, Vec<Skipped>) {
    // The copy under the name disperse gave it is the one kept.
    let canonical = |f: &Found| {
        f.path.file_name().and_then(|n| n.to_str())
            != Some(format!("piece-{:03}", f.header.index).as_str())
    };
    let mut found = found.to_vec();
    found.sort_by_key(|f| canonical(f));
    let mut keep: Vec<&Found> = Vec::new();
    let mut copies = Vec::new();
    for f in found {
        // The same index and the same body CRC: a copy (two bodies that differ under one
        // index and one CRC were altered on purpose, and the subsets sort them out).
        match keep.iter().find(|k| {
            k.header.index == f.header.index && k.header.body_crc32c == f.header.body_crc32c
        }) {
            Some(k) => copies.push(Skipped {
                path: f.path.clone(),
                why: format!("a copy of {}", k.path.display()),
            }),
            None => keep.push(f),
        }
    }
    keep.sort_by_key(|f| f.header.index);
    (keep, copies)
}

/// Call `visit` with each choice of `m` candidates of distinct indices, lowest indices first
/// (systematic data pieces decode fastest), until it returns false.
fn each_subset<'a>(cands: &[&'a Found], m: usize, visit: &mut dyn FnMut(&[&'a Found]) -> bool) {
    fn go<'a>(
        cands: &[&'a Found],
        m: usize,
        from: usize,
        chosen: &mut Vec<&'a Found>,
        visit: &mut dyn FnMut(&[&'a Found]) -> bool,
    ) -> bool {
        if chosen.len() == m {
            return visit(chosen);
        }
        for i in from..cands.len() {
            if cands.len() - i < m - chosen.len() {
                break;
            }
            let index = cands[i].header.index;
            if chosen.iter().any(|c| c.header.index == index) {
                continue;
            }
            chosen.push(cands[i]);
            let more = go(cands, m, i + 1, chosen, visit);
            chosen.pop();
            if !more {
                return false;
            }
        }
        true
    }
    go(cands, m, 0, &mut Vec::with_capacity(m), visit);
}

/// New pieces being written into a directory: under hidden names until [`Staging::commit`]
/// renames them (and removes the earlier dispersal of the same file), removed if dropped
/// before.
///
/// Nothing of an earlier dispersal goes before every new piece is in place and on disk: a
/// commit that fails half-way, or a crash, leaves the earlier pieces readable (under their
/// names, or a hidden `.NAME.replaced` where a new piece took the name), beside the new ones.
pub struct Staging {
    dir: PathBuf,
    staged: Vec<(PathBuf, PathBuf)>,
    committed: bool,
}

/// A piece file already in the directory, by what its header says.
struct Existing {
    path: PathBuf,
    /// The SHA-256 of the file it is a piece of (`None`: no readable header).
    sha: Option<[u8; 32]>,
}

impl Staging {
    /// Stage pieces in `dir` (created if missing). A directory that already holds pieces
    /// (files named `piece-*` or starting with the piece magic) is refused unless `replace`:
    /// then the commit replaces the earlier pieces of the same file, and only those.
    pub fn new(dir: &Path, replace: bool) -> Result<Self, DirError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if !replace {
            let old = existing_pieces(dir)?;
            if !old.is_empty() {
                return Err(DirError::HoldsPieces {
                    dir: dir.to_path_buf(),
                    paths: old,
                });
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            staged: Vec::new(),
            committed: false,
        })
    }

    /// A new, empty file for piece `index` (to be `piece-NNN`), open for writing.
    pub fn create(&mut self, index: u8) -> Result<(PathBuf, File), DirError> {
        let name = format!("piece-{index:03}");
        let tmp = self.dir.join(format!(".{name}.partial"));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io(&tmp))?;
        self.staged.push((tmp.clone(), self.dir.join(name)));
        Ok((tmp, f))
    }

    /// Put the new pieces of the file whose SHA-256 is `sha` in place and remove the earlier
    /// pieces of the same file; the new pieces' paths. In order: the new pieces are synced;
    /// a piece name held by another file's piece refuses the commit; a name held by an
    /// earlier piece of this file (or by a file that is no piece) is kept under a hidden
    /// name; the new pieces take their names and the directory is synced; only then do the
    /// earlier pieces go. A failed rename puts back what the commit had renamed.
    pub fn commit(mut self, sha: &[u8; 32]) -> Result<Vec<PathBuf>, DirError> {
        for (tmp, _) in &self.staged {
            File::open(tmp)
                .and_then(|f| f.sync_all())
                .map_err(io(tmp))?;
        }
        let staged: Vec<&PathBuf> = self.staged.iter().map(|(tmp, _)| tmp).collect();
        let existing = existing_pieces(&self.dir)?
            .into_iter()
            .filter(|path| !staged.contains(&path))
            .map(|path| {
                let sha = read_piece_sha(&path);
                Existing { path, sha }
            })
            .collect::<Vec<_>>();
        let taken: Vec<PathBuf> = self
            .staged
            .iter()
            .filter_map(|(_, fin)| existing.iter().find(|e| &e.path == fin))
            .filter(|e| e.sha.is_some_and(|s| &s != sha))
            .map(|e| e.path.clone())
            .collect();
        if !taken.is_empty() {
            return Err(DirError::NamesTaken {
                dir: self.dir.clone(),
                paths: taken,
            });
        }
        // Keep whatever a new piece's name holds until the new dispersal is whole.
        let mut kept: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (_, fin) in &self.staged {
            // (Not a directory: the rename below fails on it, and is undone.)
            if std::fs::symlink_metadata(fin).is_ok_and(|m| m.is_file()) {
                let backup = self.dir.join(format!(".{}.replaced", name_of(fin)));
                let _ = std::fs::remove_file(&backup);
                std::fs::hard_link(fin, &backup).map_err(io(fin))?;
                kept.push((backup, fin.clone()));
            }
        }
        let mut renamed: Vec<&PathBuf> = Vec::new();
        for (tmp, fin) in &self.staged {
            if let Err(err) = std::fs::rename(tmp, fin) {
                // Put back what was there: the earlier dispersal stays as it was.
                for fin in renamed {
                    match kept.iter().find(|(_, f)| f == fin) {
                        Some((backup, _)) => {
                            let _ = std::fs::rename(backup, fin);
                        }
                        None => {
                            let _ = std::fs::remove_file(fin);
                        }
                    }
                }
                for (backup, _) in &kept {
                    let _ = std::fs::remove_file(backup);
                }
                return Err(DirError::Io {
                    path: fin.clone(),
                    err,
                });
            }
            renamed.push(fin);
        }
        self.committed = true;
        sync_dir(&self.dir)?;
        // The new dispersal is whole and on disk: the earlier one of this file may go.
        let finals: Vec<&PathBuf> = self.staged.iter().map(|(_, f)| f).collect();
        let earlier = existing
            .iter()
            .filter(|e| e.sha.as_ref() == Some(sha) && !finals.contains(&&e.path))
            .map(|e| &e.path);
        for path in earlier.chain(kept.iter().map(|(b, _)| b)) {
            std::fs::remove_file(path).map_err(io(path))?;
        }
        sync_dir(&self.dir)?;
        Ok(self.staged.iter().map(|(_, p)| p.clone()).collect())
    }
}

/// The SHA-256 of the file that `path` holds a piece of, if its header reads.
fn read_piece_sha(path: &Path) -> Option<[u8; 32]> {
    let f = File::open(path).ok()?;
    let mut head = vec![0u8; BODY_AT];
    let got = f.read_at(&mut head, 0).ok()?;
    read_header(&head[..got]).ok().map(|(h, _)| h.file_sha256)
}

/// Make a directory's entries (renames, removals) durable.
fn sync_dir(dir: &Path) -> Result<(), DirError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            for (tmp, _) in &self.staged {
                let _ = std::fs::remove_file(tmp);
            }
        }
    }
}

/// Write `pieces` (one file's) into `dir` as `piece-000`, `piece-001`, … ([`Staging`]: a
/// failed write leaves the directory as it was).
pub fn write_pieces(dir: &Path, pieces: &[Piece], replace: bool) -> Result<Vec<PathBuf>, DirError> {
    let Some(first) = pieces.first() else {
        return Ok(Vec::new());
    };
    let mut staging = Staging::new(dir, replace)?;
    for p in pieces {
        let (tmp, f) = staging.create(p.header.index)?;
        f.write_all_at(&p.to_bytes(), 0).map_err(io(&tmp))?;
    }
    staging.commit(&first.header.file_sha256)
}

/// Disperse the file at `input` with `d` into `dir` as `piece-000`, … in bounded memory
/// ([`stream::disperse_file`]), staged as [`write_pieces`] does.
pub fn disperse_into(
    d: &Dispersal,
    input: &Path,
    dir: &Path,
    replace: bool,
) -> Result<(stream::Dispersed, Vec<PathBuf>), DirError> {
    let mut staging = Staging::new(dir, replace)?;
    let files = (0..d.n())
        .map(|i| staging.create(i as u8))
        .collect::<Result<Vec<_>, _>>()?;
    let done = stream::disperse_file(d, input, &files).map_err(|e| match e {
        StreamError::Io { path, err } => DirError::Io { path, err },
        StreamError::Piece { path, err } => DirError::Io {
            path,
            err: std::io::Error::other(err.to_string()),
        },
    })?;
    drop(files);
    let paths = staging.commit(&done.sha256)?;
    Ok((done, paths))
}

/// A rebuilt file's hidden name beside where it goes, removed unless it is committed.
struct Partial {
    path: PathBuf,
}

impl Partial {
    fn beside(out: &Path) -> Self {
        let name = out
            .file_name()
            .map_or("rebuilt".into(), |n| n.to_string_lossy().into_owned());
        let path = out.with_file_name(format!(".{name}.partial"));
        Self { path }
    }

    /// A new, empty file for an attempt.
    fn create(&self) -> Result<File, StreamError> {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)
            .map_err(|err| StreamError::Io {
                path: self.path.clone(),
                err,
            })
    }

    fn commit(self, out: &Path) -> Result<(), DirError> {
        std::fs::rename(&self.path, out).map_err(io(out))
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Regular files of `dir` named `piece-*` or starting with the piece magic.
fn existing_pieces(dir: &Path) -> Result<Vec<PathBuf>, DirError> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = e.map_err(io(dir))?.path();
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("piece-"));
        let mut head = [0u8; 8];
        let magic = std::fs::File::open(&path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
            && &head == MAGIC;
        if named || magic {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ida::Dispersal;

    fn found(pieces: &[Piece], names: &[(&str, usize)]) -> Vec<Found> {
        names
            .iter()
            .map(|&(name, i)| Found {
                path: PathBuf::from(name),
                header: pieces[i].header.clone(),
                body_at: BODY_AT as u64,
            })
            .collect()
    }

    /// Subsets hold `m` distinct indices, come lowest first, and number C(k, m) when every
    /// index is distinct; two bodies under one index never meet in a subset.
    #[test]
    fn subsets_are_distinct_indices_lowest_first() {
        let pieces = Dispersal::new(6, 3, Mode::Rabin)
            .unwrap()
            .disperse(&[7; 99]);
        let all = found(&pieces, &[("a", 0), ("b", 1), ("c", 2), ("d", 3), ("e", 4)]);
        let refs: Vec<&Found> = all.iter().collect();
        let mut seen = Vec::new();
        each_subset(&refs, 3, &mut |s| {
            seen.push(s.iter().map(|f| f.header.index).collect::<Vec<_>>());
            true
        });
        assert_eq!(seen.len(), 10);
        assert_eq!(seen[0], [0, 1, 2]);
        let mut other = pieces[1].header.clone();
        other.body_crc32c ^= 1;
        let mut twice = all.clone();
        twice.insert(
            2,
            Found {
                path: "b2".into(),
                header: other,
                body_at: BODY_AT as u64,
            },
        );
        let refs: Vec<&Found> = twice.iter().collect();
        let mut n = 0;
        each_subset(&refs, 3, &mut |s| {
            let mut ix: Vec<u8> = s.iter().map(|f| f.header.index).collect();
            ix.dedup();
            assert_eq!(ix.len(), 3);
            n += 1;
            n < 5
        });
        assert_eq!(n, 5, "stops when told");
    }

    /// Copies are kept once, under the name `disperse` gave them.
    #[test]
    fn the_copy_kept_is_the_one_named_as_dispersed() {
        let pieces = Dispersal::new(4, 2, Mode::Rabin).unwrap().disperse(b"abc");
        let all = found(&pieces, &[("a copy", 1), ("piece-001", 1), ("x", 0)]);
        let refs: Vec<&Found> = all.iter().collect();
        let (keep, copies) = dedup(&refs);
        assert_eq!(keep.len(), 2);
        assert_eq!(keep[1].path, PathBuf::from("piece-001"));
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].path, PathBuf::from("a copy"));
        assert_eq!(copies[0].why, "a copy of piece-001");
    }
}
