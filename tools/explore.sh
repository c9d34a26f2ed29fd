#!/usr/bin/env bash
# Random exploration, apart from `cargo test` (which runs from committed seeds): the property
# tests from fresh seeds with many cases, and the fault runner over a fresh range of
# schedules. A failure is a bug: proptest writes its case to proptest-regressions/ (commit
# it with the fix); the fault runner prints the shrunk schedule (add it to the replayed
# schedules of src/sim/faults/membership.rs).
#
#   tools/explore.sh [ROUNDS] [CASES] [SCHEDULES]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
cases=${2:-5000}
schedules=${3:-20000}
cargo build --release --quiet
cargo test --release --lib --no-run --quiet
for r in $(seq 1 "$rounds"); do
    seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
    echo "== round $r: PROPTEST_RNG_SEED=$seed, $cases cases per property"
    PROPTEST_RNG_SEED=$seed PROPTEST_CASES=$cases cargo test --release --lib --quiet \
        || { echo "a property failed: its case is in proptest-regressions/"; exit 1; }
    first=$(( (seed % 1000000000) + 1 ))
    echo "== round $r: weft sim faults --seed $first --schedules $schedules"
    ./target/release/weft sim faults --protocol membership --seed "$first" \
        --schedules "$schedules" --json
done
