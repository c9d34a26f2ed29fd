//! In-memory checkpoints for a runtime, the way FTI or VeloC are used: each process protects
//! its state, checkpoints it, and after a failure any survivor rebuilds the lost state.
//!
//! `cargo run --release --example checkpoint` starts eight storage nodes on loopback (a job's
//! processes in miniature), checkpoints a 4 MiB state on each, stops two of them and rebuilds
//! both states on survivors: every state is dispersed with IDA over a neighborhood of four
//! (any two of its four pieces rebuild it), so two losses in a neighborhood are survived.

use weft::storage::StorageConfig;
use weft::transport::storage::Checkpointer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = StorageConfig::default();
    let mut job = Checkpointer::on_loopback(8, &Default::default(), &cfg)?;
    let state =
        |rank: u64| -> Vec<u8> { (0..4 << 20).map(|i| (i as u64 * 31 + rank) as u8).collect() };
    for node in &job {
        node.protect(node.id().0, state(node.id().0));
    }
    for node in &job {
        let c = node.checkpoint(1)?;
        println!("{}: checkpoint 1 kept as {} pieces", node.id(), c.pieces);
    }
    // Two processes die.
    for victim in [5, 2] {
        job.remove(victim).stop()?;
    }
    for (vid, survivor) in [(2u64, &job[0]), (5, &job[3])] {
        let data = survivor.recover(vid, None)?;
        assert_eq!(data, state(vid), "rebuilt byte-exact");
        println!(
            "{} rebuilt the state of n{vid}: {} bytes",
            survivor.id(),
            data.len()
        );
    }
    Ok(())
}
