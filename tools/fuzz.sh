#!/usr/bin/env bash
# Fuzz every decoder of network and disk bytes (frames, every protocol message, the handshake,
# IDA pieces) with libFuzzer (cargo-fuzz). The Rust toolchain here is
# stable, so RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z sanitizer flags.
#   tools/fuzz.sh [RUNS]    (default 1,000,000 executions, starting from fuzz/seeds/frame)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
mkdir -p corpus/frame
cp -n seeds/frame/* corpus/frame/ 2>/dev/null || true
RUSTC_BOOTSTRAP=1 cargo fuzz run frame corpus/frame -- -runs="${1:-1000000}" -max_len=16384
