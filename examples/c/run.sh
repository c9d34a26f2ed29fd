#!/usr/bin/env bash
# Build weft's C library, install it (libweft.so and .a, weft.h, weft.pc) under $PREFIX
# (default target/c-prefix), build examples/c/ring.c with plain cc against the installed
# header and pkg-config file, and run it:
#   run.sh [mpirun|hydra|valgrind|ping] [ranks]   (default: mpirun 4)
# mpirun and hydra: rank 2 SIGKILLs itself after the first lap; exit 0 when every survivor
# agreed. valgrind: 3 ranks under valgrind (memcheck), none killed; any error fails.
# ping: round trips through the C ABI (examples/c/ping.c, 2 ranks on 2 cores, TCP), busy
# and sleeping on the fd, then weft's own protocol and endpoint paths in the same sitting
# (`weft ping --compare-api`); WEFT_PING_SIZES, WEFT_PING_ITERS as ping.c says.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${PREFIX:-$root/target/c-prefix}
mode=${1:-mpirun}
np=${2:-4}

cargo build --release --quiet -p weft-c --manifest-path "$root/Cargo.toml"
install -d "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/bin"
install -m 0755 "$root/target/release/libweft_c.so" "$prefix/lib/libweft.so"
install -m 0644 "$root/target/release/libweft_c.a" "$prefix/lib/libweft.a"
install -m 0644 "$root/capi/include/weft.h" "$prefix/include/weft.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/capi/Cargo.toml" | head -1)
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$root/examples/c/weft.pc.in" \
    > "$prefix/lib/pkgconfig/weft.pc"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046 # pkg-config's words are separate flags
cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -g -Wall -Wextra -Werror \
    -o "$prefix/bin/weft-ring" "$root/examples/c/ring.c" \
    $(pkg-config --cflags --libs weft) -Wl,-rpath,"$prefix/lib"
# shellcheck disable=SC2046
cc -std=c11 -D_POSIX_C_SOURCE=200809L -O2 -g -Wall -Wextra -Werror \
    -o "$prefix/bin/weft-ping" "$root/examples/c/ping.c" \
    $(pkg-config --cflags --libs weft) -Wl,-rpath,"$prefix/lib"

export WEFT_JOB_SECRET=${WEFT_JOB_SECRET:-weft-c-ring}
unset WEFT_JOB_KEY
# Launchers in their fault modes do not fail for a rank's death, nor always for a rank's
# exit status: the verdict is every survivor's "-> ok" line.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
survivors=$((np - 1))
case "$mode" in
mpirun)
    export WEFT_RING_KILL=2
    mpirun --allow-run-as-root --oversubscribe \
        --mca orte_enable_recovery true --mca orte_abort_on_non_zero_status 0 \
        -np "$np" -x WEFT_JOB_SECRET -x WEFT_RING_KILL "$prefix/bin/weft-ring" 2>&1 | tee "$out" || true
    ;;
hydra)
    export WEFT_RING_KILL=2
    # Hydra ends the whole job when a process dies of a signal, -disable-auto-cleanup or
    # not: each rank runs under a shell that exits 0 after it, so Hydra sees an exit. The
    # rank itself is SIGKILLed all the same, and its peers see exactly that.
    mpiexec.hydra -disable-auto-cleanup -n "$np" -genv WEFT_JOB_SECRET "$WEFT_JOB_SECRET" \
        -genv WEFT_RING_KILL 2 sh -c '"$0"; exit 0' "$prefix/bin/weft-ring" 2>&1 \
        | tee "$out" || true
    ;;
valgrind)
    # io_uring's completions are written by the kernel where memcheck cannot see them: the
    # poll backend's reads are system calls it follows. Shared-memory links need
    # pidfd_open, which valgrind does not know: TCP. Ranks run ~30x slower: heartbeats of 2 s.
    export WEFT_BACKEND=poll WEFT_TRANSPORT=tcp WEFT_RING_KILL= WEFT_RING_HEARTBEAT_MS=2000
    survivors=$np
    mpirun --allow-run-as-root --oversubscribe -np "$np" \
        -x WEFT_JOB_SECRET -x WEFT_BACKEND -x WEFT_TRANSPORT -x WEFT_RING_KILL \
        -x WEFT_RING_HEARTBEAT_MS \
        valgrind --error-exitcode=99 --leak-check=no \
        "$prefix/bin/weft-ring" 2>&1 | tee "$out" || true
    if ! grep -q "ERROR SUMMARY: 0 errors" "$out" \
        || [ "$(grep -c 'ERROR SUMMARY: 0 errors' "$out")" -ne "$np" ]; then
        echo "run.sh: valgrind found errors (or a rank did not finish)" >&2
        exit 1
    fi
    ;;
ping)
    export WEFT_TRANSPORT=tcp WEFT_PING_SIZES=${WEFT_PING_SIZES:-32,1048576}
    export WEFT_PING_ITERS=${WEFT_PING_ITERS:-5000}
    for wait in busy fd; do
        WEFT_PING_WAIT=$wait mpirun --allow-run-as-root --bind-to core -np 2 \
            -x WEFT_JOB_SECRET -x WEFT_TRANSPORT -x WEFT_PING_SIZES -x WEFT_PING_ITERS \
            -x WEFT_PING_WAIT "$prefix/bin/weft-ping"
    done
    cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin weft
    "$root/target/release/weft" ping --compare-api --transport tcp --wait busy \
        --sizes "$WEFT_PING_SIZES" --iters "$WEFT_PING_ITERS" --rounds 1 --json
    exit 0
    ;;
*)
    echo "usage: $0 [mpirun|hydra|valgrind|ping] [ranks]" >&2
    exit 2
    ;;
esac
ok=$(grep -c -- "-> ok$" "$out" || true)
if [ "$ok" -ne "$survivors" ]; then
    echo "run.sh: $ok of $survivors survivors agreed" >&2
    exit 1
fi
echo "run.sh: all $survivors survivors agreed ($mode, $np ranks)"
