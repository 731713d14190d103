#!/usr/bin/env bash
# Builds the NCCL conformance harness (conformance) and the CPU test of its host reference
# (reference_test) with g++ against the reference nccl.h and the CUDA runtime; no GPU needed to
# build. Prints the folder holding both programs.
#   scripts/nccl-conformance/build.sh [--test] [OUT_DIR]     (default OUT_DIR: target/nccl-conformance)
# --test also runs reference_test (prints `N passed, M failed`, fails on a failure).
# Headers and runtime, first found wins:
#   nccl.h:      $NCCL_INCLUDE, .deps/nccl (scripts/nccl-header.sh: 2.28.9), the pip nvidia-nccl-cu13 of /opt/torch/.venv
#   CUDA:        $CUDA_HOME, /usr/local/cuda, .deps/nccl/nvidia/cu13 (the runtime wheel scripts/nccl-header.sh installs)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
src="$root/scripts/nccl-conformance"
run_test=0
if [ "${1:-}" = "--test" ]; then run_test=1; shift; fi
out="${1:-$root/target/nccl-conformance}"
mkdir -p "$out"

nccl_inc=""
for d in "${NCCL_INCLUDE:-}" "$root/.deps/nccl/nvidia/nccl/include" /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/include; do
  if [ -n "$d" ] && [ -f "$d/nccl.h" ]; then nccl_inc="$d"; break; fi
done
[ -n "$nccl_inc" ] || { echo "no nccl.h: set NCCL_INCLUDE or run scripts/nccl-header.sh" >&2; exit 2; }

cuda_inc=""; cudart=""
for home in "${CUDA_HOME:-}" /usr/local/cuda "$root/.deps/nccl/nvidia/cu13"; do
  [ -n "$home" ] && [ -f "$home/include/cuda_runtime.h" ] && [ -f "$home/include/crt/host_config.h" ] || continue
  for lib in "$home/lib64/libcudart.so" "$home/lib/libcudart.so" "$home/lib64/libcudart.so.13" "$home/lib/libcudart.so.13" \
             "$home/targets/x86_64-linux/lib/libcudart.so"; do
    if [ -f "$lib" ]; then cuda_inc="$home/include"; cudart="$lib"; break 2; fi
  done
done
[ -n "$cudart" ] || { echo "no CUDA runtime (cuda_runtime.h with crt/ and libcudart): set CUDA_HOME or run scripts/nccl-header.sh" >&2; exit 2; }

includes=(-I"$nccl_inc" -I"$cuda_inc")
[ -d "$cuda_inc/cccl" ] && includes+=(-I"$cuda_inc/cccl")
flags=(-std=c++17 -O2 -g -Wall -Wextra -Werror)
echo "nccl.h from $nccl_inc, CUDA from $cuda_inc, runtime $cudart" >&2
g++ "${flags[@]}" "${includes[@]}" "$src/reference_test.cpp" -o "$out/reference_test"
g++ "${flags[@]}" "${includes[@]}" "$src/conformance.cpp" -o "$out/conformance" \
  "$cudart" -Wl,-rpath,"$(dirname "$cudart")" -ldl -lpthread
if [ "$run_test" = 1 ]; then "$out/reference_test" >&2; fi
echo "$out"
