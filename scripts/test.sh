#!/usr/bin/env bash
# Every test weft has that needs no GPU: formatting, lints, unit/property/integration tests,
# NVRTC compiles of every kernel and the layout probe for sm_90, the generated header's
# freshness, the C ABI of libnccl.so.2 against the real nccl.h, and the CPU part of `weft selftest`.
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT_CUDA_HOME="$(scripts/cuda-wheels.sh)"
WEFT_NCCL_HEADER_DIR="$(scripts/nccl-header.sh)"
export WEFT_NCCL_HEADER_DIR
export WEFT_CUDA_HOME WEFT_REQUIRE_NVRTC=1 WEFT_CACHE_DIR="$PWD/target/weft-kernel-cache"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
cargo run --quiet --locked -p weft -- gen-header --check
cargo run --quiet --locked -p weft -- selftest
