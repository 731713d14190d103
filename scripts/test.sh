#!/usr/bin/env bash
# Every test weft has that needs no GPU: formatting, lints, unit/property/integration tests,
# loom models, NVRTC compiles of every kernel and the layout probe for sm_90, the generated
# header's freshness, the C ABI of libnccl.so.2 against the real nccl.h, a minute of fuzzing
# per decoder, the CPU part of `weft selftest`, the numbered examples (the GPU ones run to their
# declared skip), and the Python package's tests (pytest, against the wheel built and installed
# into .deps/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
# A run from a clean clone builds everything once: incremental caches (3.5 GB) and full debug
# info (most of the 4.6 GB of deps) only cost disk there, and a CI machine once ran out of it.
# Line tables keep panics' backtraces readable. Every cargo call below, maturin's included,
# inherits these, so the wheel still reuses the test build.
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
echo "test.sh: $(df -h . | awk 'NR == 2 { print $4 }') free on the build disk"
WEFT_CUDA_HOME="$(scripts/cuda-wheels.sh)"
WEFT_NCCL_HEADER_DIR="$(scripts/nccl-header.sh)"
# The C ABI tests of weft-nccl fail instead of skipping when gcc or nccl.h is missing.
export WEFT_NCCL_HEADER_DIR WEFT_REQUIRE_CC=1
# rdma-core's verbs.h and libibverbs.so.1 (no NIC needed) for the `ib` feature's binding tests.
WEFT_IBVERBS_ROOT="$(scripts/ibverbs.sh)"
export WEFT_IBVERBS_ROOT WEFT_REQUIRE_IBVERBS=1
export WEFT_CUDA_HOME WEFT_REQUIRE_NVRTC=1 WEFT_CACHE_DIR="$PWD/target/weft-kernel-cache"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The verbs transport (feature `ib`) over the software RC fabric, alone and under the proxy, and
# its rdma-core binding against the real verbs.h and libibverbs.so.1.
cargo clippy --locked -p weft-net --features ib --all-targets -- -D warnings
cargo test --locked -p weft-net --features ib --lib --test proxy_ib
# Loom models of the FIFO host side and the proxy flow control (about 20 s on 2 cores).
RUSTFLAGS="--cfg weft_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
  cargo test --locked -p weft-net --lib --release loom
# The `weft` Python package: the wheel (dev profile, reusing the build above) installed into
# .deps/venv, then its tests: the tensor boundary, the collectives' arguments, weft.ep's checks.
scripts/python-wheel.sh > /dev/null
.deps/venv/bin/python -m pytest -q
# The numbered examples: 03 runs on the CPU, the GPU ones run to their declared skip here.
scripts/examples.sh
cargo run --quiet --locked -p weft-cli -- gen-header --check
# The libFuzzer targets of the decoders of untrusted bytes (bootstrap frames, memory descriptors,
# plans, tuning tables, the proxy's wire), 60 s each from the committed corpus; a crash fails
# the run and keeps its input (docs/reliability.md).
scripts/fuzz.sh 60
# compute-sanitizer's verdicts (scripts/sanitize.sh, run on GPU machines) on sample logs.
scripts/sanitize.sh --check-verdicts
# Last, so the run closes on the suite's `N passed, M failed` line.
cargo run --quiet --locked -p weft-cli -- selftest
