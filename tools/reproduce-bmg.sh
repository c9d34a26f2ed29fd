#!/usr/bin/env bash
# Regenerate the measured tables of bluegene_notes/bmg-reproduction.md (CSV + SVG in $OUT).
# Takes a few minutes on 2 cores; the largest runs are the 2^20-process sync run and the
# 2^17-process async run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-target/bmg-repro}
mkdir -p "$OUT"
cargo build --release --quiet
W=target/release/weft

for tree in binary binomial; do
    for sched in sync async; do
        max=16
        [ "$tree" = binary ] && max=15
        $W sim bmg --sweep --tree $tree --scheduler $sched --max-depth $max --seed 1 \
            --csv "$OUT/$tree-$sched.csv" --plot "$OUT/$tree-$sched.svg"
    done
done
# The asynchronous scheduler's policies side by side (the sweeps above take messages first).
for tree in binary binomial; do
    max=16
    [ "$tree" = binary ] && max=15
    for policy in alternate random; do
        $W sim bmg --sweep --tree $tree --scheduler async --async-policy $policy --max-depth $max \
            --seed 1 --csv "$OUT/$tree-async-$policy.csv"
    done
done
$W sim bmg --sweep --tree binomial --scheduler async --async-policy random --max-delay 0 \
    --max-depth 16 --seed 1 --csv "$OUT/binomial-async-coin.csv"
for sched in sync async; do
    $W sim bmg --sweep --tree random --degree 4 --scheduler $sched --max-depth 12 --runs 3 --seed 1 \
        --csv "$OUT/random-$sched.csv" --plot "$OUT/random-$sched.svg"
done
# Self-stabilization from arbitrary configurations.
for tree in binary binomial random; do
    for sched in sync async; do
        $W sim bmg --tree $tree --depth 10 --degree 4 --scheduler $sched --init random --seed 1 \
            --silence-rounds 500 --json
    done
done
# Scale: the simulator's own speed and memory.
/usr/bin/time -f "peak RSS %M KiB, %e s" $W sim bmg --tree binary --depth 19 --seed 1 --json
/usr/bin/time -f "peak RSS %M KiB, %e s" $W sim bmg --tree binomial --depth 17 --scheduler async --seed 1 --json
