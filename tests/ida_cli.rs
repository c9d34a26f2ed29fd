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
            let bad = dir.join("bad.bin");
            let o = weft(&["ida", "reconstruct", s(&out_dir), "-o", s(&bad)]);
            assert!(!o.status.success());
            assert!(String::from_utf8_lossy(&o.stderr).contains("needed"));
            assert!(!bad.exists());
        }
    }
}

#[test]
fn corrupt_pieces_are_skipped_and_foreign_pieces_refused() {
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
    // A piece of another file in the same directory: refused.
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
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("different files"));
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
