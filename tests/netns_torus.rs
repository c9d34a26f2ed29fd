//! The emulated 3-D torus (`weft::bench::hosts::torus`): network-namespace hosts linked to
//! their six neighbours with wrap-around and dimension-ordered routes, where every pair of
//! hosts is as many kernel forwarding steps apart as the torus formula says, and
//! `weft bench stabilize --torus` running on it.
//!
//! Needs root and iproute2; under `CI=true` their absence fails.

mod common;

use common::skip::skip;
use std::process::Command;
use weft::bench::hosts::{torus, Cluster};
use weft::topology::torus::Torus;
use weft::Rank;

fn can_make_hosts() -> bool {
    // SAFETY: geteuid has no preconditions.
    let ok = unsafe { libc::geteuid() } == 0
        && Command::new("ip")
            .args(["netns", "list"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        skip("needs root and iproute2 for network namespaces");
    }
    ok
}

/// Run `cmd` (a `weft … --json`), which must succeed; its last JSON line.
fn last_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("weft runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.lines().last().expect("a JSON line")).expect("JSON")
}

fn namespaces_of(pid: u32) -> usize {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&format!("weft-{pid}-h")))
        .count()
}

#[test]
fn every_pair_of_torus_hosts_is_the_formulas_hop_count_of_forwarding_steps_apart() {
    if !can_make_hosts() {
        return;
    }
    for shape in ["2x2x2", "4x4x4", "3x2x1"] {
        let t: Torus = shape.parse().expect("a torus");
        let cluster = Cluster::torus(t, None).expect("the torus is made");
        let hops = torus::probe_hops(&cluster).expect("every probe arrives");
        let k = t.size() as usize;
        assert_eq!(
            hops.len(),
            k * (k - 1),
            "{shape}: one probe per ordered pair"
        );
        let mut far = 0;
        for (a, b, h) in hops {
            assert_eq!(h, t.hops(Rank(a), Rank(b)), "{shape}: host {a} to host {b}");
            far = far.max(h);
        }
        assert_eq!(
            far,
            t.diameter(),
            "{shape}: the farthest pair is the diameter apart"
        );
        drop(cluster);
        assert_eq!(
            namespaces_of(std::process::id()),
            0,
            "{shape}: the hosts are gone once the torus is dropped"
        );
    }
}

#[test]
fn a_stabilization_runs_on_the_torus_and_its_report_names_the_torus() {
    if !can_make_hosts() {
        return;
    }
    let r = last_json(
        common::weft_command(&[], &["bench", "stabilize", "--json"]).args([
            "--torus", "2x2x2", "--nodes", "8", "--repeat", "2", "--radix", "2",
        ]),
    );
    assert_eq!(r["torus"], "2x2x2", "{r}");
    assert_eq!(r["hosts"], 8, "{r}");
    assert_eq!(r["views_agree"], true, "{r}");
    assert_eq!(r["repeat"], 2, "{r}");
}

#[test]
fn a_torus_too_large_is_refused_by_its_size_not_by_its_empty_hosts() {
    // Fewer ranks than hosts is a job smaller than its partition, not an error; more hosts
    // than the harness makes is.
    let out = common::weft_command(&[], &["bench", "stabilize"])
        .args(["--torus", "20x20x20", "--nodes", "8"])
        .output()
        .expect("weft runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at most 1000 hosts"), "{err}");
}

#[test]
fn failures_the_torus_cannot_route_round_are_refused_with_the_reason() {
    for (fail, why) in [
        ("link", "on the torus 2x2x2 a host has six"),
        ("host-down", "would cut every route through that host"),
    ] {
        let out = common::weft_command(&[], &["bench", "stabilize"])
            .args(["--torus", "2x2x2", "--nodes", "8", "--fail", fail])
            .output()
            .expect("weft runs");
        assert!(!out.status.success(), "--fail {fail}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "--fail {fail}: {err}");
    }
}

#[test]
fn model_validate_on_the_torus_measures_l_at_every_hop_count_and_feeds_the_torus_to_the_models() {
    if !can_make_hosts() {
        return;
    }
    let r = last_json(
        common::weft_command(&[], &["model", "validate", "--json"])
            .args(["--torus", "2x2x2", "--nodes-list", "8", "--repeat", "2"])
            .args(["--radix", "2"]),
    );
    assert_eq!(r["testbed_torus"], "2x2x2", "{r}");
    assert_eq!(
        r["torus"], "2x2x2",
        "the distance model's torus is the testbed's: {r}"
    );
    // 2x2x2: rank 0's neighbours are 1, 2 and 4, rank 7 is three hops away.
    let at = r["l_at_hops_us"].as_array().expect("L(h) per hop count");
    assert_eq!(at.len(), 3, "{r}");
    assert!(
        at.iter().all(|l| l.as_f64().is_some_and(|l| l > 0.0)),
        "{r}"
    );
    assert!(
        r["l_us"].as_f64().is_some_and(|l| l > 0.0),
        "the paper's L, one hop's: {r}"
    );
    assert!(r["hop_latency_us"].as_f64().is_some_and(|m| m > 0.0), "{r}");
    assert!(r["l_hop_us"].is_number(), "{r}");
    assert!(
        r["cold"]["l_cold_us"].as_f64().is_some_and(|l| l > 0.0),
        "{r}"
    );
    assert_eq!(r["views_agree"], true, "{r}");
}
