#!/usr/bin/env bash
# torch.distributed.all_reduce (bf16, CUDA graph) through the real NCCL and through weft's
# libnccl.so.2, one after the other from this script, on every visible GPU; prints size, NCCL
# µs, weft µs and the ratio, and keeps both runs' rows in ${OUT:-out}/.
#   scripts/package-nccl.sh && TORCHRUN=/path/to/torchrun scripts/torch-nccl-compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
torchrun="${TORCHRUN:-torchrun}"
gpus="${GPUS:-$(nvidia-smi -L | wc -l)}"
lib="${WEFT_NCCL:-$PWD/target/nccl/libnccl.so.2}"
out="${OUT:-out}"
mkdir -p "$out"
"$torchrun" --nproc-per-node "$gpus" scripts/torch-allreduce-bench.py 2> "$out/torch-nccl.log" | grep '^{' > "$out/torch-nccl.jsonl"
LD_PRELOAD="$lib" "$torchrun" --nproc-per-node "$gpus" scripts/torch-allreduce-bench.py 2> "$out/torch-weft.log" \
  | grep '^{' > "$out/torch-weft.jsonl"
python3 - "$out/torch-nccl.jsonl" "$out/torch-weft.jsonl" <<'PY'
import json, sys
nccl, weft = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
print(f"{'bytes':>10} {'nccl us':>9} {'weft us':>9} {'ratio':>6}")
for a, b in zip(nccl, weft):
    print(f"{a['bytes']:>10} {a['us']:>9.2f} {b['us']:>9.2f} {a['us'] / b['us']:>6.2f}")
PY
