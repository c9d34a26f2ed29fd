#!/usr/bin/env bash
# Regenerates the measured tables of bluegene_notes/membership-models.md: Ts after a real
# failure on in-process loopback nodes (weft bench stabilize) for N = 16..1024, radix 2 and 4,
# both backends, and the model validation sweep. Run on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
weft=target/release/weft
out=${1:-stabilize-results}
mkdir -p "$out"
seed=${SEED:-1}
repeat=${REPEAT:-20}
for backend in uring poll; do
    for radix in 2 4; do
        "$weft" bench stabilize --nodes-list 16,64,256,1024 --radix "$radix" --fail inner \
            --backend "$backend" --repeat "$repeat" --seed "$seed" --json \
            | tee -a "$out/bench.jsonl"
    done
done
for radix in 2 4; do
    "$weft" model validate --nodes-list 4,16,64,256,1024 --radix "$radix" --fail leaf \
        --repeat "$repeat" --seed "$seed" --plot "$out/validate-radix$radix.svg" \
        | tee "$out/validate-radix$radix.txt"
done
