#!/usr/bin/env bash
# AllReduce on every visible GPU: correctness across types and operators, then the bf16-sum
# sweep against NCCL in the same run (eager and CUDA-graph). Logs go to ${OUT:-out}/.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-out}"; mkdir -p "$out"
weft="${WEFT:-target/release/weft}"
for dtype in f32 f16 bf16 f8e4m3 f8e5m2 i8 u8 i32 u32 i64 u64 f64; do
  timeout 60 "$weft" bench allreduce -b 4 -e 4M -f 32 --dtype "$dtype" --op sum --check --graph \
    > "$out/check-$dtype-sum.txt" 2>&1; echo "check $dtype sum: rc=$? $(grep '# .* wrong' "$out/check-$dtype-sum.txt")"
done
for op in prod max min avg; do
  for dtype in bf16 i32 f8e4m3; do
    timeout 60 "$weft" bench allreduce -b 4 -e 4M -f 32 --dtype "$dtype" --op "$op" --check \
      > "$out/check-$dtype-$op.txt" 2>&1; echo "check $dtype $op: rc=$? $(grep '# .* wrong' "$out/check-$dtype-$op.txt")"
  done
done
timeout 300 "$weft" bench allreduce -b 1K -e 1G -f 4 --dtype bf16 --op sum --graph --check --nccl \
  --json "$out/allreduce-graph.json" 2>&1 | tee "$out/allreduce-graph.txt"
timeout 120 "$weft" bench allreduce -b 1K -e 1G -f 16 --dtype bf16 --op sum --nccl \
  --json "$out/allreduce-eager.json" 2>&1 | tee "$out/allreduce-eager.txt"
