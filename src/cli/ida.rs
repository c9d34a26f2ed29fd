//! `weft ida`: disperse a file into pieces, rebuild it from any m of them, and benchmark.

use super::values::{IdaModeArg, KernelArg};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use weft::bench::ida::{measure, memcpy, BenchRow, CONFIGS, SIZES};
use weft::ida::dir::{disperse_into, name_of, scan, DirError};
use weft::ida::{Dispersal, Kernel, Mode};

/// `weft ida ...`
#[derive(Subcommand, Debug)]
pub enum IdaCommand {
    /// Cut FILE into n pieces, any m of which rebuild it (DIR/piece-000, ...).
    Disperse(DisperseArgs),
    /// Rebuild a file from the pieces in DIR (any m suffice).
    Reconstruct(ReconstructArgs),
    /// Encode and decode throughput, beside memcpy in the same run.
    Bench(BenchArgs),
}

/// Arguments of `weft ida disperse`.
#[derive(Args, Debug)]
pub struct DisperseArgs {
    /// The file to disperse.
    file: PathBuf,
    /// Pieces to make (n <= 255).
    #[arg(short)]
    n: usize,
    /// Pieces needed to rebuild (1 <= m <= n).
    #[arg(short)]
    m: usize,
    /// Rabin (every piece a combination) or systematic (pieces 0..m hold the data).
    #[arg(long, value_enum, default_value = "rabin")]
    mode: IdaModeArg,
    /// Directory for the pieces (created if missing; refused if it holds pieces already).
    #[arg(short, long)]
    out: PathBuf,
    /// Replace an earlier dispersal of the same file in the directory: its pieces go once
    /// the new ones are written and on disk. Pieces of other files stay.
    #[arg(long)]
    replace: bool,
}

/// Arguments of `weft ida reconstruct`.
#[derive(Args, Debug)]
pub struct ReconstructArgs {
    /// Directory holding pieces.
    dir: PathBuf,
    /// Where to write the rebuilt file.
    #[arg(short, long)]
    out: PathBuf,
    /// When pieces of several files lie there: the one whose SHA-256 starts with this (hex).
    #[arg(long, value_parser = sha_prefix)]
    file_sha: Option<String>,
}

fn sha_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 || !s.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "{s:?} is not a SHA-256 prefix (1 to 64 hex digits)"
        ));
    }
    Ok(s.to_ascii_lowercase())
}

/// Arguments of `weft ida bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Region kernel (default: the fastest this CPU runs, or WEFT_GF_KERNEL).
    #[arg(long, value_enum)]
    kernel: Option<KernelArg>,
    /// Seconds spent per measurement (the best run counts).
    #[arg(long, default_value_t = 0.3)]
    budget_s: f64,
    /// One JSON object per measurement.
    #[arg(long)]
    json: bool,
}

/// Run `weft ida ...`.
pub fn run(cmd: IdaCommand) -> anyhow::Result<()> {
    match cmd {
        IdaCommand::Disperse(a) => disperse(a),
        IdaCommand::Reconstruct(a) => rebuild(a),
        IdaCommand::Bench(a) => bench(a),
    }
}

fn disperse(a: DisperseArgs) -> anyhow::Result<()> {
    let mode: Mode = a.mode.into();
    let d = Dispersal::new(a.n, a.m, mode)?;
    anyhow::ensure!(
        std::fs::metadata(&a.file)
            .with_context(|| format!("reading {}", a.file.display()))?
            .is_file(),
        "{}: not a regular file",
        a.file.display()
    );
    let (done, _) = match disperse_into(&d, &a.file, &a.out, a.replace) {
        Err(e @ DirError::HoldsPieces { .. }) => bail!("{e} (--replace)"),
        r => r?,
    };
    say!(
        "{}: {} bytes -> {} pieces of {} bytes in {} ({} mode, any {} rebuild it, kernel {})",
        a.file.display(),
        done.file_len,
        a.n,
        done.piece_len,
        a.out.display(),
        mode,
        a.m,
        d.kernel()
    );
    Ok(())
}

fn rebuild(a: ReconstructArgs) -> anyhow::Result<()> {
    let found = scan(&a.dir)?;
    for s in &found.skipped {
        eprintln!("skipping {}: {}", s.path.display(), s.why);
    }
    let r = found.rebuild(a.file_sha.as_deref(), &a.out)?;
    for s in &r.skipped {
        eprintln!("skipping {}: {}", s.path.display(), s.why);
    }
    let used: Vec<String> = r.used.iter().map(|p| name_of(p)).collect();
    say!(
        "{}: {} bytes rebuilt from {} ({} spare, {} subset(s) tried), SHA-256 verified",
        a.out.display(),
        r.len,
        used.join(", "),
        r.spare,
        r.subsets_tried
    );
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let kernel = match a.kernel.map(Kernel::from) {
        Some(k) if !k.available() => bail!("kernel {k} is not supported by this CPU"),
        Some(k) => k,
        None => Kernel::detect()?,
    };
    let budget = Duration::from_secs_f64(a.budget_s.max(0.01));
    if !a.json {
        say!(
            "weft ida bench: kernel {kernel}, best of {:.1} s per figure, GB/s of file bytes{}",
            budget.as_secs_f64(),
            if cfg!(feature = "isal") {
                ", ISA-L in the same run"
            } else {
                ""
            }
        );
        say!(
            "{:>6} {:>10} {:>3} {:>3} {:>8} {:>9} {:>7} {:>7} {:>9} {:>8}",
            "op",
            "mode",
            "m",
            "n",
            "bytes",
            "kernel",
            "GB/s",
            "/memcpy",
            "isal GB/s",
            "/isal"
        );
    }
    for bytes in SIZES {
        let copy = memcpy(bytes, budget);
        print_row(&a, &copy, copy.gb_per_s, None);
        for mode in [Mode::Systematic, Mode::Rabin] {
            for (m, n) in CONFIGS {
                let ours = measure(m, n, bytes, mode, kernel, budget)?;
                let peers = isal_rows(m, n, bytes, mode, budget)?;
                for r in &ours {
                    // Pair each of our rows with ISA-L's own dispatch for the same operation.
                    let peer = peers
                        .iter()
                        .filter(|p| p.op == r.op)
                        .find(|p| p.kernel == "isal");
                    print_row(&a, r, copy.gb_per_s, peer.map(|p| p.gb_per_s));
                }
                for p in &peers {
                    if a.json {
                        say!("{}", serde_json::to_string(p)?);
                    }
                }
            }
        }
    }
    Ok(())
}

fn print_row(a: &BenchArgs, r: &BenchRow, memcpy_gbs: f64, isal: Option<f64>) {
    if a.json {
        say!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    let (peer, ratio) = match isal {
        Some(g) => (format!("{g:.2}"), format!("{:.2}", r.gb_per_s / g)),
        None => ("-".into(), "-".into()),
    };
    say!(
        "{:>6} {:>10} {:>3} {:>3} {:>8} {:>9} {:>7.2} {:>7.2} {:>9} {:>8}",
        r.op,
        r.mode,
        r.m,
        r.n,
        r.bytes,
        r.kernel,
        r.gb_per_s,
        r.gb_per_s / memcpy_gbs,
        peer,
        ratio
    );
}

#[cfg(feature = "isal")]
fn isal_rows(
    m: usize,
    n: usize,
    bytes: usize,
    mode: Mode,
    budget: Duration,
) -> anyhow::Result<Vec<BenchRow>> {
    use weft::bench::ida::measure_isal;
    use weft::ida::isal::Variant;
    let mut rows = measure_isal(m, n, bytes, mode, Variant::Auto, budget)?;
    rows.extend(measure_isal(m, n, bytes, mode, Variant::Avx2, budget)?);
    Ok(rows)
}

#[cfg(not(feature = "isal"))]
fn isal_rows(_: usize, _: usize, _: usize, _: Mode, _: Duration) -> anyhow::Result<Vec<BenchRow>> {
    Ok(Vec::new())
}
