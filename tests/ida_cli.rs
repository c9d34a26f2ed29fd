//! `weft ida disperse` / `reconstruct` on real files: delete any n - m pieces, rebuild byte for
//! byte; corrupt or foreign pieces are refused, never turned into wrong data.

mod common;

use common::{scratch, weft};
use std::path::{Path, PathBuf};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn pieces(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn any_m_pieces_rebuild_the_file_in_both_modes() {
    for (mode, n, m, len) in [
        ("rabin", 7, 4, 100_000usize),
        ("systematic", 14, 10, 1_000_003),
        ("rabin", 3, 1, 17),
        ("systematic", 5, 5, 0),
    ] {
        let dir = scratch(&format!("{mode}-{n}-{m}"));
        let file = dir.join("input.bin");
        let data: Vec<u8> = (0..len)
            .map(|i| {
                (i as u64)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .rotate_left(17) as u8
            })
            .collect();
        std::fs::write(&file, &data).unwrap();
        let out_dir = dir.join("pieces");
        let o = weft(&[
            "ida",
            "disperse",
            s(&file),
            "-n",
            &n.to_string(),
            "-m",
            &m.to_string(),
            "--mode",
            mode,
            "-o",
            s(&out_dir),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let all = pieces(&out_dir);
        assert_eq!(all.len(), n);
        // Delete n - m pieces: every other one first, then from the front.
        let mut doomed: Vec<usize> = (0..n).step_by(2).chain(0..n).collect();
        doomed.dedup();
        let mut removed = std::collections::BTreeSet::new();
        for i in doomed {
            if removed.len() == n - m {
                break;
            }
            if removed.insert(i) {
                std::fs::remove_file(&all[i]).unwrap();
            }
        }
        let rebuilt = dir.join("rebuilt.bin");
        let o = weft(&["ida", "reconstruct", s(&out_dir), "-o", s(&rebuilt)]);
        assert!(
            o.status.success(),
            "{mode} ({n},{m}): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(std::fs::read(&rebuilt).unwrap(), data, "{mode} ({n},{m})");
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(said.contains("SHA-256 verified"), "{said}");
        // One more missing piece: a clear error, no output file.
        if m > 0 && n > m {
            std::fs::remove_file(pieces(&out_dir)[0].clone()).unwrap();
            refused(&dir, &out_dir, "needed");
        }
    }
}

#[test]
fn corrupt_and_foreign_pieces_are_skipped_and_named() {
    let dir = scratch("corrupt");
    let file = dir.join("a.bin");
    std::fs::write(&file, vec![42u8; 50_000]).unwrap();
    let out_dir = dir.join("p");
    assert!(weft(&[
        "ida",
        "disperse",
        s(&file),
        "-n",
        "6",
        "-m",
        "3",
        "-o",
        s(&out_dir)
    ])
    .status
    .success());
    // Flip a byte in one body: that piece is reported and skipped; 5 good ones remain.
    let victim = pieces(&out_dir)[1].clone();
    let mut bytes = std::fs::read(&victim).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&victim, bytes).unwrap();
    let rebuilt = dir.join("r.bin");
    let o = weft(&["ida", "reconstruct", s(&out_dir), "-o", s(&rebuilt)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("corrupted"));
    assert_eq!(std::fs::read(&rebuilt).unwrap(), vec![42u8; 50_000]);
    // A piece of another file in the same directory: passed over, named.
    let other = dir.join("b.bin");
    std::fs::write(&other, vec![7u8; 50_000]).unwrap();
    let other_dir = dir.join("q");
    assert!(weft(&[
        "ida",
        "disperse",
        s(&other),
        "-n",
        "6",
        "-m",
        "3",
        "-o",
        s(&other_dir)
    ])
    .status
    .success());
    std::fs::copy(pieces(&other_dir)[0].clone(), out_dir.join("piece-100")).unwrap();
    let o = weft(&[
        "ida",
        "reconstruct",
        s(&out_dir),
        "-o",
        s(&dir.join("x.bin")),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("piece-100: a piece of another file"));
    // Bad parameters are refused up front.
    let o = weft(&[
        "ida",
        "disperse",
        s(&file),
        "-n",
        "3",
        "-m",
        "4",
        "-o",
        s(&dir.join("z")),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("1 <= m <= n <= 255"));
}

/// Disperse `data` (written to `dir/name`) into `out`; the CLI's output.
fn disperse(dir: &Path, name: &str, data: &[u8], nm: (usize, usize), mode: &str, out: &Path) {
    let file = dir.join(name);
    std::fs::write(&file, data).unwrap();
    let (n, m) = (n_str(nm.0), n_str(nm.1));
    let o = weft(&[
        "ida",
        "disperse",
        s(&file),
        "-n",
        &n,
        "-m",
        &m,
        "--mode",
        mode,
        "-o",
        s(out),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn n_str(n: usize) -> String {
    n.to_string()
}

fn bytes_of(len: usize, salt: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            (i ^ salt)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(23) as u8
        })
        .collect()
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = std::fs::read(path).unwrap();
    f(&mut b);
    std::fs::write(path, b).unwrap();
}

/// Alter a piece's body and make both its CRCs agree: only the file's SHA-256 can tell.
fn alter_with_good_crcs(path: &Path) {
    let mut p = weft::ida::Piece::from_bytes(&std::fs::read(path).unwrap()).unwrap();
    p.body[0] ^= 0x5a;
    p.header.body_crc32c = crc32c::crc32c(&p.body);
    std::fs::write(path, p.to_bytes()).unwrap();
    assert!(weft::ida::Piece::from_bytes(&std::fs::read(path).unwrap()).is_ok());
}

/// Everything a user may leave beside a file's pieces, at once: a piece whose header is
/// damaged, one whose body is, a truncated one, a copy under another name, pieces of another
/// file, a piece of an older dispersal of the same file, a subdirectory and junk. The file
/// comes back; every passed-over entry is named with its reason, the pieces used are named.
#[test]
fn a_directory_as_users_leave_it_still_rebuilds() {
    let dir = scratch("left");
    let data = bytes_of(100_000, 1);
    let p = dir.join("p");
    disperse(&dir, "a.bin", &data, (7, 4), "rabin", &p);
    let q = dir.join("q");
    disperse(&dir, "b.bin", &bytes_of(5000, 2), (5, 3), "rabin", &q);
    let r = dir.join("r");
    disperse(&dir, "a2.bin", &data, (6, 5), "systematic", &r);
    edit(&p.join("piece-000"), |b| b[16 + 57] ^= 1); // the index, in the header
    edit(&p.join("piece-001"), |b| *b.last_mut().unwrap() ^= 1);
    edit(&p.join("piece-002"), |b| b.truncate(100));
    std::fs::copy(p.join("piece-003"), p.join("copy of 3")).unwrap();
    std::fs::copy(q.join("piece-000"), p.join("b-0")).unwrap();
    std::fs::copy(q.join("piece-001"), p.join("b-1")).unwrap();
    std::fs::copy(r.join("piece-002"), p.join("old-2")).unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::write(p.join("notes.txt"), "my pieces").unwrap();
    let out = dir.join("out.bin");
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&out)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), data);
    for (name, why) in [
        ("piece-000", "header CRC-32C mismatch"),
        ("piece-001", "corrupted (CRC-32C mismatch)"),
        ("piece-002", "truncated"),
        ("copy of 3", "a copy of"),
        ("b-0", "a piece of another file"),
        ("b-1", "a piece of another file"),
        (
            "old-2",
            "another dispersal of this file (n = 6, m = 5, systematic)",
        ),
        ("sub", "a directory"),
        ("notes.txt", "not a weft IDA piece"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("{name}: ")) && l.contains(why)),
            "{name} ({why}) not named:\n{err}"
        );
    }
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("from piece-003, piece-004, piece-005, piece-006"),
        "{said}"
    );
}

/// A piece altered together with its CRCs passes every check but the file's SHA-256: the
/// rebuild tries other subsets until one matches, and never writes wrong data. With no
/// spare piece, it is an error that says so.
#[test]
fn an_altered_piece_with_good_crcs_is_outvoted() {
    let dir = scratch("altered");
    let data = bytes_of(30_000, 3);
    let p = dir.join("p");
    disperse(&dir, "a.bin", &data, (6, 4), "rabin", &p);
    alter_with_good_crcs(&p.join("piece-001"));
    let out = dir.join("out.bin");
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), data);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(!said.contains("piece-001"), "{said}");
    assert!(!said.contains(" 1 subset(s)"), "{said}");
    // No spare: every subset holds the altered piece.
    std::fs::remove_file(p.join("piece-004")).unwrap();
    std::fs::remove_file(p.join("piece-005")).unwrap();
    refused(&dir, &p, "pieces were altered");
}

/// `reconstruct` of `pieces` fails, says `why`, and writes no file.
fn refused(dir: &Path, pieces: &Path, why: &str) {
    let bad = dir.join("bad.bin");
    let o = weft(&["ida", "reconstruct", s(pieces), "-o", s(&bad)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains(why), "{err}");
    assert!(!bad.exists());
}

/// Directories that cannot give one file say why: too few pieces (how many, of which file),
/// two complete files (both named; --file-sha picks one), a prefix that is not hex.
#[test]
fn unrecoverable_directories_say_why() {
    let dir = scratch("why");
    let a = bytes_of(10_000, 4);
    let b = bytes_of(20_000, 5);
    let p = dir.join("p");
    disperse(&dir, "a.bin", &a, (5, 3), "systematic", &p);
    let q = dir.join("q");
    disperse(&dir, "b.bin", &b, (4, 2), "rabin", &q);
    for i in 0..2 {
        let name = format!("piece-{i:03}");
        std::fs::copy(q.join(&name), p.join(format!("b-{name}"))).unwrap();
    }
    let out = dir.join("out.bin");
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&out)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("2 files") && err.contains("--file-sha"),
        "{err}"
    );
    assert!(!out.exists());
    let sha_b: String = sha256_hex(&b);
    let o = weft(&[
        "ida",
        "reconstruct",
        s(&p),
        "-o",
        s(&out),
        "--file-sha",
        &sha_b[..10],
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), b);
    let o = weft(&[
        "ida",
        "reconstruct",
        s(&p),
        "-o",
        s(&out),
        "--file-sha",
        "xyz",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a SHA-256 prefix"));
    // Too few of the one file: how many, and of which.
    std::fs::remove_file(p.join("b-piece-001")).unwrap();
    for i in 0..3 {
        std::fs::remove_file(p.join(format!("piece-{i:03}"))).unwrap();
    }
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&out)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("2 distinct valid piece(s), 3 needed"), "{err}");
    let o = weft(&["ida", "reconstruct", s(&dir.join("nowhere")), "-o", s(&out)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nowhere"));
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every file of `dir` with its bytes (subdirectories by name, empty).
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    pieces(dir)
        .into_iter()
        .map(|f| {
            if f.is_dir() {
                return (f, Vec::new());
            }
            let b = std::fs::read(&f).unwrap();
            (f, b)
        })
        .collect()
}

/// `disperse` into a directory that holds pieces refuses and changes nothing; with
/// --replace, the earlier dispersal of the same file is replaced, and only it: the pieces of
/// another file are never replaced (a name they hold refuses the dispersal).
#[test]
fn disperse_never_leaves_a_mix() {
    let dir = scratch("mix");
    let a = bytes_of(10_000, 6);
    let b = bytes_of(7_000, 7);
    let p = dir.join("p");
    disperse(&dir, "a.bin", &a, (6, 3), "rabin", &p);
    std::fs::copy(p.join("piece-005"), p.join("renamed")).unwrap();
    std::fs::write(p.join("notes.txt"), "mine").unwrap();
    let before = contents(&p);
    let args = |file: &Path| {
        [
            "ida",
            "disperse",
            s(file),
            "-n",
            "4",
            "-m",
            "2",
            "-o",
            s(&p),
        ]
        .map(String::from)
    };
    let run = |file: &Path, extra: &[&str]| {
        let a = args(file);
        let all: Vec<&str> = a
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        weft(&all)
    };
    let file_b = dir.join("b.bin");
    std::fs::write(&file_b, &b).unwrap();
    let o = run(&file_b, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("already holds 7 piece file(s)") && err.contains("--replace"),
        "{err}"
    );
    assert_eq!(before, contents(&p));
    // --replace with another file: its names are a's pieces', which it may not replace.
    let o = run(&file_b, &["--replace"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("pieces of another file"), "{err}");
    assert_eq!(before, contents(&p));
    // --replace with a again: every earlier piece of a goes (the copy too), notes stay.
    let file_a = dir.join("a.bin");
    let o = run(&file_a, &["--replace"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let names: Vec<String> = pieces(&p)
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "notes.txt",
            "piece-000",
            "piece-001",
            "piece-002",
            "piece-003"
        ]
    );
    let out = dir.join("out.bin");
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), a);
}

/// A `--replace` that fails half-way (a new piece's name is a directory, so its rename
/// fails after others succeeded) keeps the earlier dispersal whole: it still rebuilds, and
/// no new piece is left beside it. Before, every old piece was unlinked first and the new
/// ones not yet renamed were removed: neither file could be rebuilt.
#[test]
fn a_failed_replace_keeps_the_earlier_dispersal() {
    let dir = scratch("failed-replace");
    let f = bytes_of(20_000, 8);
    let pe = dir.join("pe");
    disperse(&dir, "f.bin", &f, (4, 3), "rabin", &pe);
    std::fs::create_dir(pe.join("piece-004")).unwrap();
    let before = contents(&pe);
    // The same file with more pieces: piece-000..003 are replaced, piece-004 cannot be.
    let file = dir.join("f.bin");
    let o = weft(&[
        "ida",
        "disperse",
        s(&file),
        "-n",
        "6",
        "-m",
        "5",
        "-o",
        s(&pe),
        "--replace",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("piece-004"), "{err}");
    assert_eq!(before, contents(&pe), "the earlier dispersal as it was");
    let hidden: Vec<_> = std::fs::read_dir(&pe)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "left behind: {hidden:?}");
    let out = dir.join("out.bin");
    let o = weft(&["ida", "reconstruct", s(&pe), "-o", s(&out)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), f);
    // A different file's dispersal over it is refused before anything is renamed.
    let g = bytes_of(9_000, 9);
    let file_g = dir.join("g.bin");
    std::fs::write(&file_g, &g).unwrap();
    let o = weft(&[
        "ida",
        "disperse",
        s(&file_g),
        "-n",
        "6",
        "-m",
        "5",
        "-o",
        s(&pe),
        "--replace",
    ]);
    assert!(!o.status.success());
    assert_eq!(before, contents(&pe));
}

/// `--replace` replaces the earlier dispersal of the same file only: a directory that also
/// holds a complete dispersal of another file under other names keeps it, and both files
/// rebuild by `--file-sha`.
#[test]
fn replace_keeps_the_pieces_of_other_files() {
    let dir = scratch("replace-others");
    let (f, g) = (bytes_of(12_000, 10), bytes_of(8_000, 11));
    let pm = dir.join("pm");
    let gdir = dir.join("g-pieces");
    disperse(&dir, "g.bin", &g, (3, 2), "rabin", &gdir);
    std::fs::create_dir(&pm).unwrap();
    for (i, piece) in pieces(&gdir).iter().enumerate() {
        std::fs::copy(piece, pm.join(format!("g-{i}.ida"))).unwrap();
    }
    let file_f = dir.join("f.bin");
    std::fs::write(&file_f, &f).unwrap();
    for _ in 0..2 {
        let o = weft(&[
            "ida",
            "disperse",
            s(&file_f),
            "-n",
            "4",
            "-m",
            "2",
            "-o",
            s(&pm),
            "--replace",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(pieces(&pm).len(), 3 + 4);
    for (data, name) in [(&f, "f"), (&g, "g")] {
        let out = dir.join(format!("{name}.out"));
        let sha = sha256_hex(data);
        let o = weft(&[
            "ida",
            "reconstruct",
            s(&pm),
            "--file-sha",
            &sha[..12],
            "-o",
            s(&out),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(&std::fs::read(&out).unwrap(), data);
    }
}

/// A rebuild whose output is one of the pieces it reads is refused, and the piece stays.
#[test]
fn a_rebuild_never_overwrites_a_piece_it_reads() {
    let dir = scratch("out-is-input");
    let f = bytes_of(5_000, 12);
    let p = dir.join("p");
    disperse(&dir, "f.bin", &f, (4, 2), "rabin", &p);
    let before = contents(&p);
    let target = p.join("piece-000");
    let o = weft(&["ida", "reconstruct", s(&p), "-o", s(&target)]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("one of the files the rebuild reads"), "{err}");
    assert_eq!(before, contents(&p));
}

/// Run `weft args`; its exit status and its peak resident memory (KiB), from `wait4`.
fn peak_rss(args: &[&str]) -> (bool, u64) {
    let child = common::weft_command(&[], args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run weft");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // reaped by wait4
    (
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        usage.ru_maxrss as u64,
    )
}

/// A file larger than the memory a dispersal or a rebuild may take (`ida::stream`: two sets of
/// m + n blocks of 1 MiB here, 20 MiB, and one more for the hash) is dispersed and rebuilt
/// byte for byte, each in under 64 MiB of resident memory while the file is 320 MiB (before
/// streaming, a 1 GiB file took 2.6 GB to disperse and 5.0 GB to rebuild).
#[test]
fn a_file_larger_than_memory_disperses_and_rebuilds_in_bounded_memory() {
    let dir = scratch("large");
    let file = dir.join("large.bin");
    let len: u64 = 320 << 20;
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..len / 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.write_all(&x.to_le_bytes()).unwrap();
        }
    }
    let out_dir = dir.join("pieces");
    let (ok, disperse_kib) = peak_rss(&[
        "ida",
        "disperse",
        s(&file),
        "-n",
        "6",
        "-m",
        "4",
        "--mode",
        "systematic",
        "-o",
        s(&out_dir),
    ]);
    assert!(ok, "disperse failed");
    // Two data pieces lost: parity takes part in the rebuild.
    std::fs::remove_file(out_dir.join("piece-000")).unwrap();
    std::fs::remove_file(out_dir.join("piece-002")).unwrap();
    let rebuilt = dir.join("rebuilt.bin");
    let (ok, rebuild_kib) = peak_rss(&["ida", "reconstruct", s(&out_dir), "-o", s(&rebuilt)]);
    assert!(ok, "reconstruct failed");
    let same = {
        use std::io::Read;
        let (mut a, mut b) = (
            std::fs::File::open(&file).unwrap(),
            std::fs::File::open(&rebuilt).unwrap(),
        );
        let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
        loop {
            let n = a.read(&mut x).unwrap();
            let m = b.read(&mut y[..n.max(1)]).unwrap();
            if n == 0 {
                break m == 0;
            }
            if m != n || x[..n] != y[..n] {
                break false;
            }
        }
    };
    assert!(same, "the rebuilt file differs");
    for (what, kib) in [("disperse", disperse_kib), ("reconstruct", rebuild_kib)] {
        assert!(
            kib < 64 * 1024,
            "{what} of a {} MiB file took {} MiB",
            len >> 20,
            kib / 1024
        );
    }
}
