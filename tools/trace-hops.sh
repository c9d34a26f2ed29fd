#!/usr/bin/env bash
# Where a ping-pong's one-way time goes, for weft and the std peer in the same run, from the
# kernel's syscall tracepoints: no patch to either side, and both pay the same per-event cost
# (a traced receive with data or a traced write costs ~0.5-1 us here, so absolute times run
# high and a side with more such events, the peer's 8-byte length read, looks slower).
#
# Per thread (weft's reactors are weft-n0/weft-n1, the peer's are the others), medians of:
#   write  a message's send or gather write, entry to exit (the loopback delivery runs inside
#          it, on the sender's core);
#   tail   from the other side's write returning to this side's receive that completes the
#          message;
#   turn   from that receive to the entry of this side's next write: the user-space
#          turnaround, weft's engine, protocol and serialization against the peer's loop.
#
#   tools/trace-hops.sh WEFT_BINARY SIZE [ITERS [BACKEND]]     (needs `perf`, as root)
# Example: tools/trace-hops.sh target/release/weft 32768 12000 poll
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,16p' "$0" >&2
    exit 2
fi
bin=$1 size=$2 iters=${3:-12000} backend=${4:-poll}
command -v perf >/dev/null || { echo "trace-hops: perf is not installed (Debian: linux-perf)" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
events=(-e syscalls:sys_exit_recvfrom --filter 'ret > 0')
for call in write writev sendto sendmsg; do
    events+=(-e "syscalls:sys_enter_$call" -e "syscalls:sys_exit_$call")
done
perf record -q -o "$dir/perf.data" "${events[@]}" \
    "$bin" ping --sizes "$size" --iters "$iters" --rounds 6 --backend "$backend" --wait busy \
    --compare >"$dir/ping.txt" 2>&1
grep -E "^ +$size B" "$dir/ping.txt" || true
perf script --ns -i "$dir/perf.data" -F comm,pid,tid,time,event,trace 2>/dev/null >"$dir/trace.txt"
python3 - "$dir/trace.txt" "$size" <<'PY'
import collections, re, statistics, sys
size = int(sys.argv[2])
line_re = re.compile(
    r"\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(.*)")
events, role = [], {}
for line in open(sys.argv[1]):
    m = line_re.match(line)
    if m:
        comm, pid, tid, t, edge, call, rest = m.groups()
        side = "weft" if comm.startswith("weft-n") else "peer"
        # weft's node 0 pings and node 1 echoes; the peer pings from the main thread.
        pinger = comm == "weft-n0" if side == "weft" else pid == tid
        role[int(tid)] = f"{side} {'pinger' if pinger else 'ponger'}"
        n = int(rest.strip(), 16) if edge == "exit" else 0
        events.append((float(t) * 1e6, side, int(tid), call == "recvfrom", edge, n))
# A message is one write in a ping-pong: each side's frame is its commonest write of at least
# the payload's size (weft: header, body and padding; the peer: a length and the payload).
frame = {side: collections.Counter(n for (_, s, _, r, e, n) in events
                                   if s == side and not r and e == "exit" and n >= size
                                   ).most_common(1)[0][0]
         for side in ("weft", "peer")}
first, got, done_at, write_at, write_end = {}, collections.Counter(), {}, {}, {}
stats = collections.defaultdict(lambda: collections.defaultdict(list))
for t, side, tid, is_recv, edge, n in events:
    first.setdefault(tid, (t, side))
    if is_recv:
        got[tid] += n
        if got[tid] >= frame[side]:
            got[tid] -= frame[side]
            done_at[tid] = t
            ends = [e for (o, e) in write_end.items()
                    if o != tid and first[o][1] == side and 0 <= t - e < 1000]
            if ends:
                stats[tid]["tail"].append(t - max(ends))
    elif edge == "enter":
        write_at[tid] = t
        if tid in done_at and t - done_at[tid] < 100:
            stats[tid]["turn"].append(t - done_at.pop(tid))
    elif tid in write_at and n >= size:
        stats[tid]["write"].append(t - write_at.pop(tid))
        write_end[tid] = t
med = lambda v: f"{statistics.median(v):7.2f}" if v else "      -"
print(f"frames: weft {frame['weft']} B, peer {frame['peer']} B")
print(f"{'thread':>19} {'messages':>8}  write µs  tail µs  turn µs   (medians)")
for tid in sorted(stats, key=lambda x: first[x][0]):
    s = stats[tid]
    print(f"{role[tid]:>11} {tid:>7} {len(s['write']):8}  {med(s['write'])}  {med(s['tail'])}"
          f"  {med(s['turn'])}")
PY
