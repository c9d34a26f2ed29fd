#!/usr/bin/env bash
# Run the IDA tests (every kernel, NEON included) as aarch64 code under qemu-user, so the NEON
# path is tested on this x86-64 machine. Needs: rustup target aarch64-unknown-linux-gnu, and
# Debian's qemu-user, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
cargo test --release --target aarch64-unknown-linux-gnu --lib ida "$@"
