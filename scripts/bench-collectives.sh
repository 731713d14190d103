#!/usr/bin/env bash
# Every collective on every visible GPU against NCCL in the same run (bf16 sum, CUDA graph):
#   scripts/bench-collectives.sh check   odd element counts, every element checked (weft and NCCL)
#   scripts/bench-collectives.sh perf    1 KB .. 1 GB, factor ${FACTOR:-2}, timing only
#   scripts/bench-collectives.sh types   the type x operator matrix of the reducing collectives
# Tables, JSON and plots go to ${OUT:-out}/. Extra arguments go to every `weft bench`.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-out}"; mkdir -p "$out"
weft="${WEFT:-target/release/weft}"
mode="${1:-perf}"; shift || true
collectives="${COLLECTIVES:-allreduce allgather reducescatter alltoall broadcast reduce sendrecv}"
summary() { echo "$1: rc=$2 $(grep -h '^# .*\(wrong\|geomean\)' "$3" | tr '\n' ' ')"; }
case "$mode" in
  check)
    for c in $collectives; do
      # 6 bytes x 5^k: odd bf16 counts for the whole-buffer collectives.
      timeout 240 "$weft" bench "$c" -b 6 -e 80M -f 5 --graph --check --nccl "$@" > "$out/check-$c.txt" 2>&1
      summary "check $c" $? "$out/check-$c.txt"
      # Sizes every rank count divides, so the per-rank collectives get rows too.
      timeout 240 "$weft" bench "$c" -b 24 -e 96M -f 8 --graph --check --nccl "$@" > "$out/check24-$c.txt" 2>&1
      summary "check24 $c" $? "$out/check24-$c.txt"
    done ;;
  perf)
    for c in $collectives; do
      timeout 300 "$weft" bench "$c" -b 1K -e 1G -f "${FACTOR:-2}" --graph --nccl --json "$out/$c.json" --plot "$out/$c.png" "$@" \
        > "$out/$c.txt" 2>&1
      summary "perf $c" $? "$out/$c.txt"
    done ;;
  types)
    for c in allreduce reducescatter reduce; do
      for dtype in f32 f16 bf16 f8e4m3 f8e5m2 i8 u8 i32 u32 i64 u64 f64; do
        for op in sum prod max min avg; do
          timeout 60 "$weft" bench "$c" -b 24 -e 24M -f 32 --dtype "$dtype" --op "$op" --check --graph "$@" \
            > "$out/types-$c-$dtype-$op.txt" 2>&1
          summary "types $c $dtype $op" $? "$out/types-$c-$dtype-$op.txt"
        done
      done
    done ;;
  *) echo "usage: $0 check|perf|types [weft bench options]" >&2; exit 2 ;;
esac
