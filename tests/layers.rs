//! The layer map of `../shared/DESIGN.md`, held as a test: every module's references to other
//! modules of the crate (`use crate::…`, `crate::x::…` paths, `super::` paths that climb out
//! of the module) must be edges the allowed graph below contains. A new edge is a design
//! question, to be answered in DESIGN.md and here, not a shortcut.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Leaves: any module may use them.
const LEAVES: &[&str] = &["metrics", "rng", "buf", "id", "sys"];

/// What each part may import besides the leaves (DESIGN.md, "What each part may import").
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "bench",
        &[
            "transport",
            "sim",
            "model",
            "engine",
            "bootstrap",
            "storage",
            "bsp",
            "proto",
            "ida",
            "topology",
        ],
    ),
    (
        "transport",
        &[
            "engine",
            "bootstrap",
            "wire",
            "storage",
            "bsp",
            "proto",
            "topology",
        ],
    ),
    ("sim", &["proto", "storage", "bsp", "topology"]),
    ("model", &["topology"]),
    ("engine", &["wire", "proto"]),
    ("storage", &["proto", "ida", "topology"]),
    ("bsp", &["proto", "ida", "topology", "storage"]),
    ("bootstrap", &["wire"]),
    ("wire", &["proto"]),
    ("proto", &["topology"]),
    ("ida", &[]),
    ("topology", &[]),
    ("metrics", &[]),
    ("rng", &[]),
    ("buf", &[]),
    ("id", &[]),
    ("sys", &[]),
];

/// Names the crate root holds for a part (`crate::NodeId` is `crate::id::NodeId`; an exported
/// macro lives at the root whatever module defines it: `for_each_message!` is proto's list of
/// its message types).
fn root_item(name: &str) -> Option<&'static str> {
    match name {
        "NodeId" | "Rank" | "ArchivedNodeId" | "ArchivedRank" => Some("id"),
        "for_each_message" => Some("proto"),
        _ => None,
    }
}

/// The module (top-level part) a reference `crate::<name>` names.
fn target_of(name: &str) -> String {
    root_item(name).map_or_else(|| name.to_string(), str::to_string)
}

/// Every module a source file (of module `module`, `depth` directories below `src/<module>`)
/// refers to, with the line it does it on. Comments are skipped. A `super::` chain counts from
/// the file's own module, so code in an inline module (`mod tests`) names other parts of the
/// crate with `crate::` paths.
fn references(text: &str, depth: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    // `super::` climbs out of the module from a file `depth` levels below it (a `mod.rs` or a
    // top-level `x.rs` is at depth 0, `x/y.rs` at 1): that many plus one `super::`s name the
    // crate root.
    let to_root = "super::".repeat(depth + 1);
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for (prefix, skip) in [
            ("crate::", "crate::".len()),
            (to_root.as_str(), to_root.len()),
        ] {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                // `super::super::x` must not also count as `super::x` at a shallower depth.
                let before = &rest[..at];
                let after = &rest[at + skip..];
                rest = after;
                if prefix.starts_with("super") && before.ends_with("super::") {
                    continue;
                }
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "super" && name != "self" {
                    out.push((target_of(&name), i + 1));
                }
            }
        }
    }
    out
}

/// The forbidden edges of the tree under `src`: (from, to, file:line).
fn violations(src: &Path) -> Vec<(String, String, String)> {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, to)| {
            (
                *m,
                to.iter().copied().chain(LEAVES.iter().copied()).collect(),
            )
        })
        .collect();
    let mut bad = Vec::new();
    let mut files = Vec::new();
    collect(src, &mut files);
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let module = parts[0].trim_end_matches(".rs").to_string();
        // The binary's side (cli, main) may use anything; the crate root wires the modules.
        if matches!(module.as_str(), "cli" | "main" | "lib") {
            continue;
        }
        // How many directories below `src/<module>` the file's own module sits.
        let is_mod = parts.last().is_some_and(|p| p == "mod.rs");
        let depth = (parts.len() - 1).saturating_sub(usize::from(is_mod));
        let text = std::fs::read_to_string(&file).expect("read source");
        let Some(ok) = allowed.get(module.as_str()) else {
            bad.push((
                module.clone(),
                "?".into(),
                format!("{}: not in the map", rel.display()),
            ));
            continue;
        };
        for (to, line) in references(&text, depth) {
            if to != module && !ok.contains(to.as_str()) {
                bad.push((module.clone(), to, format!("{}:{line}", rel.display())));
            }
        }
    }
    bad
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_module_imports_only_what_the_layer_map_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "edges the layer map (DESIGN.md) does not allow:\n{}",
        bad.iter()
            .map(|(from, to, at)| format!("  {from} -> {to}  ({at})"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The checker itself: an edge the map forbids, written each way the code can write it, is
/// caught; allowed ones and comments are not.
#[test]
fn the_checker_catches_a_forbidden_edge() {
    let dir = std::env::temp_dir().join(format!("weft-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("proto")).unwrap();
    std::fs::create_dir_all(dir.join("wire")).unwrap();
    std::fs::write(
        dir.join("proto/ring.rs"),
        "use crate::topology::bmg;\n// use crate::engine::Reactor;\nuse crate::NodeId;\n",
    )
    .unwrap();
    std::fs::write(dir.join("proto/mod.rs"), "pub mod ring;\n").unwrap();
    std::fs::write(dir.join("wire/mod.rs"), "use crate::proto::Message;\n").unwrap();
    assert!(violations(&dir).is_empty(), "{:?}", violations(&dir));
    for (file, text) in [
        ("proto/ring.rs", "use crate::engine::Reactor;\n"),
        ("proto/ring.rs", "fn f() { crate::wire::write_frame(); }\n"),
        ("proto/ring.rs", "use super::super::transport::Node;\n"),
        ("proto/mod.rs", "use super::sim::World;\n"),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
        let bad = violations(&dir);
        assert_eq!(bad.len(), 1, "{file}: {text:?} gave {bad:?}");
        assert_eq!(bad[0].0, "proto");
        std::fs::write(dir.join(file), "").unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
