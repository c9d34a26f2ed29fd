//! Helpers the integration tests share: run the real `weft` binary, get a scratch dir, wait
//! for what in-process nodes report ([`events`]), check that a node still serves
//! ([`serving`]), shake hands by hand ([`handshake`]).
#![allow(dead_code)] // each test crate uses its own subset

pub mod events;
pub mod handshake;
pub mod serving;

use std::path::PathBuf;
use std::process::{Command, Output};

/// Run `weft` with `args`, the variables in `env` set and the backend variables cleared.
pub fn weft_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(args)
        .env_remove("WEFT_BACKEND")
        .env_remove("WEFT_URING_UNAVAILABLE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run weft")
}

/// Run `weft` with `args`.
pub fn weft(args: &[&str]) -> Output {
    weft_env(&[], args)
}

/// An empty scratch directory, unique to this test process and `name`.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
