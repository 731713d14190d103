#!/usr/bin/env python3
"""A tensor-parallel MLP forward pass (Megatron style: column-parallel up-projection, GELU,
row-parallel down-projection finished by all_reduce), run through whichever libnccl.so.2 the
process loads. Every rank checks its output against a float64 forward pass of the full,
unsharded weights computed locally, and rank 0 saves the output so that a run through the real
NCCL and a run through weft can be compared (scripts/gpu-suite.sh torch does both).

    torchrun --nproc-per-node 4 scripts/torch-tp-mlp.py --save out/mlp-nccl.pt
    LD_PRELOAD=$PWD/target/nccl/libnccl.so.2 torchrun --nproc-per-node 4 \
        scripts/torch-tp-mlp.py --save out/mlp-weft.pt --compare out/mlp-nccl.pt

On a 2xH200 machine weft's output is bitwise the real NCCL's. Keep NVLink multicast off (NCCL_NVLS_ENABLE=0
TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Exits non-zero when a check fails.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", help="rank 0 writes its output here")
    parser.add_argument("--compare", help="an output saved by another run (e.g. through the real NCCL)")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=16384)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    if args.ffn % world:
        raise SystemExit(f"--ffn {args.ffn} must be a multiple of the {world} ranks")

    # The same full weights and input on every rank (one seed), small values so the float64
    # reference bounds the error of the low-precision run tightly.
    gen = torch.Generator().manual_seed(2024)
    x = torch.randn(args.tokens, args.hidden, generator=gen, dtype=torch.float64) * 0.5
    w_up = torch.randn(args.hidden, args.ffn, generator=gen, dtype=torch.float64) / args.hidden**0.5
    w_down = torch.randn(args.ffn, args.hidden, generator=gen, dtype=torch.float64) / args.ffn**0.5
    shard = args.ffn // world
    cols = slice(rank * shard, (rank + 1) * shard)

    # Tensor-parallel forward: each rank owns a column block of w_up and the matching row block
    # of w_down; the partial products are summed by all_reduce.
    h = torch.nn.functional.gelu(x.to(dev, dtype) @ w_up[:, cols].to(dev, dtype))
    y = h @ w_down[cols, :].to(dev, dtype)
    dist.all_reduce(y)
    torch.cuda.synchronize()

    want = torch.nn.functional.gelu(x @ w_up) @ w_down
    err = (y.double().cpu() - want).abs().max().item()
    scale = want.abs().max().item()
    tolerance = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}[dtype] * scale
    ok = torch.tensor([int(err <= tolerance)], device=dev)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    same = torch.tensor([1], device=dev)
    if args.compare:
        other = torch.load(args.compare, map_location="cpu")
        diff = (y.double().cpu() - other.double()).abs().max().item()
        same[0] = int(diff <= tolerance)
        if rank == 0:
            print(f"max |weft - other run| = {diff:.3e} (bitwise equal: {torch.equal(y.cpu(), other)})")
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
    if rank == 0:
        print(f"max |output - float64 reference| = {err:.3e} (tolerance {tolerance:.3e}); every rank ok: {bool(ok.item())}")
        if args.save:
            torch.save(y.cpu(), args.save)
    passed = bool(ok.item()) and bool(same.item())
    dist.destroy_process_group()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
