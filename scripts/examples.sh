#!/usr/bin/env bash
# Builds and runs the numbered examples of crates/weft/examples. 03_dsl_plan runs fully on the
# CPU. The GPU examples (01, 02, and the C program 04 against the built libnccl.so.2) run on the
# GPUs here, or print that they skipped and exit 0 where there is none; with WEFT_REQUIRE_GPU=1
# a skip is a failure (run it so on a GPU machine). 01 compiles its kernel with NVRTC either way
# where NVRTC is installed. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT_NCCL_HEADER_DIR="${WEFT_NCCL_HEADER_DIR:-$(scripts/nccl-header.sh)}"
target_dir="$(realpath -m "${CARGO_TARGET_DIR:-target}")"

cargo run --quiet --locked -p weft --example 03_dsl_plan | tail -n 1
cargo build --quiet --locked -p weft --examples
for example in 01_memory_channel 02_collective; do
  cargo run --quiet --locked -p weft --example "$example"
done

# The C program, built as a user would: against the reference nccl.h and weft's libnccl.so.2
# (SONAME libnccl.so.2), with the CUDA runtime that scripts/nccl-header.sh installs beside nccl.h.
cargo build --quiet --locked -p weft-nccl
lib="$target_dir/debug/examples-c"
cuda="$(realpath "$WEFT_NCCL_HEADER_DIR/../../cu13")"
mkdir -p "$lib"
ln -sfn ../libnccl.so "$lib/libnccl.so.2"
ln -sfn libnccl.so.2 "$lib/libnccl.so"
gcc -std=gnu11 -Wall -Wextra -Werror -I"$WEFT_NCCL_HEADER_DIR" -I"$cuda/include/cccl" -I"$cuda/include" \
  crates/weft/examples/04_nccl_program.c -o "$lib/04_nccl_program" \
  -L"$lib" -lnccl -L"$cuda/lib" -l:libcudart.so.13 -Wl,-rpath,"$lib:$cuda/lib"
readelf -d "$lib/04_nccl_program" | grep -q '\[libnccl.so.2\]'
"$lib/04_nccl_program"
