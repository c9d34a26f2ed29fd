#!/usr/bin/env bash
# A/B two or more weft binaries on `weft ping --compare`, alternating them so that the host's
# slow and fast spells fall on all. Each run gives weft's per-round ratios to the std peer
# (p50_ratio, mb_ratio); this prints, per binary and size, the median of the runs' medians
# and every run's median, which is what bluegene_notes/engine-latency.md reports as
# "per-round medians, N alternations".
#   tools/ping-ab.sh BACKEND SIZES RUNS BIN_A BIN_B [BIN ...]
#   ITERS (default 20000), ROUNDS (20) and WAIT (busy) pass through to `weft ping`, and
#   WEFT_TRANSPORT (tcp: the std peer's path; binaries before in-process delivery ignore it).
# Example: tools/ping-ab.sh uring 4096,16384 3 /tmp/weft-before target/release/weft
set -euo pipefail
export WEFT_TRANSPORT="${WEFT_TRANSPORT:-tcp}"
if [ $# -lt 5 ]; then
    sed -n '2,10p' "$0" >&2
    exit 2
fi
backend=$1 sizes=$2 runs=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$runs"); do
    for bin in "$@"; do
        "$bin" ping --sizes "$sizes" --iters "${ITERS:-20000}" --rounds "${ROUNDS:-20}" \
            --backend "$backend" --wait "${WAIT:-busy}" --compare --json |
            grep p50_ratio | sed "s|^|$bin\t|" >>"$out"
    done
done
python3 - "$out" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    binary, row = line.rstrip("\n").split("\t", 1)
    d = json.loads(row)
    runs[(d["size"], binary)].append((d["p50_ratio"]["median"], d["mb_ratio"]["median"]))
for (size, binary), v in sorted(runs.items()):
    p50 = [x[0] for x in v]
    mb = [x[1] for x in v]
    print(f"{size:>8} B  {binary:30}  p50 ratio {statistics.median(p50):.3f}"
          f" (runs {' '.join(f'{x:.2f}' for x in p50)})  MB/s ratio {statistics.median(mb):.3f}")
PY
