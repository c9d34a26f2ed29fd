//! Helpers the integration tests share: run the real `weft` binary, get a scratch dir, wait
//! for what in-process nodes report ([`events`]), build the BMG on real sockets
//! ([`overlay`]), check that a node still serves ([`serving`]), shake hands by hand
//! ([`handshake`]), refuse io_uring calls with real seccomp filters ([`seccomp`]), keep a
//! reactor busy or stall it ([`ticking`]), run a child as an unprivileged user
//! ([`unprivileged`]), run a one-node job as a `weft node` process ([`node_process`]), run a
//! job under a real launcher ([`launched`]) and a real Slurm cluster ([`slurm`]), and skip a
//! test that cannot run here, except under CI ([`skip`]).
#![allow(dead_code)] // each test crate uses its own subset

pub mod events;
pub mod handshake;
pub mod launched;
pub mod node_process;
pub mod overlay;
pub mod seccomp;
pub mod serving;
pub mod skip;
pub mod slurm;
pub mod ticking;
pub mod unprivileged;

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `weft` binary with `args`, the variables in `env` set and `WEFT_BACKEND` cleared.
pub fn weft_command(env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(args).env_remove("WEFT_BACKEND");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// Run `weft` with `args`, the variables in `env` set and `WEFT_BACKEND` cleared.
pub fn weft_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    weft_command(env, args).output().expect("run weft")
}

/// Run `weft` with `args`.
pub fn weft(args: &[&str]) -> Output {
    weft_env(&[], args)
}

/// A scratch directory, removed with everything in it when dropped (also when the test
/// fails: a failed test's files are not worth a leak in /tmp per run).
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An empty scratch directory, unique to this test process and `name`.
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("weft-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    Scratch(dir)
}
