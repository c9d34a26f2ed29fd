//! The `weft` binary: parse, dispatch, print errors.

mod cli;

use clap::Parser;

fn main() {
    if let Err(e) = cli::run(cli::Cli::parse()) {
        eprintln!("weft: error: {e:#}");
        std::process::exit(1);
    }
}
