#!/usr/bin/env bash
# Builds weft's libnccl.so.2 (crate weft-nccl, release) and lays it out in target/nccl/ as a
# drop-in NCCL: libnccl.so.2 (SONAME libnccl.so.2) and a libnccl.so link to it. Prints the folder.
#   LD_PRELOAD=target/nccl/libnccl.so.2 python train.py      # or LD_LIBRARY_PATH=target/nccl
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --locked -p weft-nccl >&2
out="$PWD/target/nccl"
mkdir -p "$out"
cp -f target/release/libnccl.so "$out/libnccl.so.2"
ln -sf libnccl.so.2 "$out/libnccl.so"
soname="$(readelf -d "$out/libnccl.so.2" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
if [ "$soname" != "libnccl.so.2" ]; then
  echo "unexpected SONAME '$soname' in $out/libnccl.so.2" >&2
  exit 1
fi
echo "$out"
