#!/usr/bin/env python3
"""PyTorch's NCCL backend on weft's libnccl.so.2: every collective torch.distributed offers,
checked element by element against a float64 reference.

Measured on a 2xH200 machine: 69 passed, 0 failed through weft alone and with the real NCCL
as fallback (docs/nccl-api.md).

    scripts/package-nccl.sh
    LD_PRELOAD=$PWD/target/nccl/libnccl.so.2 WEFT_NCCL_LOG=debug \
        torchrun --nproc-per-node 4 scripts/torch-nccl-test.py
    # with the real NCCL behind weft:
    WEFT_NCCL_FALLBACK_LIB=/path/to/nvidia/nccl/lib/libnccl.so.2 LD_PRELOAD=... torchrun ...

Keep NVLink multicast off (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
Prints one line per check and `N passed, M failed` on rank 0; exits non-zero on a failure.
"""

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    passed, failed = 0, 0

    def check(name, got, want):
        nonlocal passed, failed
        ok = torch.allclose(got.double().cpu(), want.double().cpu(), rtol=1e-2, atol=1e-2)
        flags = torch.tensor([int(ok)], device=dev)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        everywhere = bool(flags.item())
        passed, failed = passed + everywhere, failed + (not everywhere)
        if rank == 0:
            print(f"{'ok  ' if everywhere else 'FAIL'} {name}", flush=True)

    gen = torch.Generator().manual_seed(1234)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for count in (1, 1000, 1 << 20):
            inputs = [torch.randint(-8, 8, (count,), generator=gen).to(torch.float64) for _ in range(world)]
            mine = inputs[rank].to(dtype).to(dev)
            tag = f"{dtype} x{count}"

            t = mine.clone()
            dist.all_reduce(t)
            check(f"all_reduce sum {tag}", t, sum(inputs))

            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            check(f"all_reduce max {tag}", t, torch.stack(inputs).max(0).values)

            out = torch.empty(count * world, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, mine)
            check(f"all_gather {tag}", out, torch.cat(inputs))

            if count % world == 0:
                out = torch.empty(count // world, dtype=dtype, device=dev)
                dist.reduce_scatter_tensor(out, mine)
                check(f"reduce_scatter {tag}", out, sum(inputs).chunk(world)[rank])

                out = torch.empty_like(mine)
                dist.all_to_all_single(out, mine)
                want = torch.cat([inputs[p].chunk(world)[rank] for p in range(world)])
                check(f"all_to_all {tag}", out, want)

            t = mine.clone()
            dist.broadcast(t, src=world - 1)
            check(f"broadcast {tag}", t, inputs[world - 1])

            t = mine.clone()
            dist.reduce(t, dst=0)
            check(f"reduce {tag}", t if rank == 0 else torch.zeros(1), sum(inputs) if rank == 0 else torch.zeros(1))

            # A ring of send/recv pairs inside one group.
            out = torch.empty_like(mine)
            ops = [
                dist.P2POp(dist.isend, mine, (rank + 1) % world),
                dist.P2POp(dist.irecv, out, (rank - 1) % world),
            ]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            check(f"send/recv ring {tag}", out, inputs[(rank - 1) % world])

    # CUDA graph capture of an all-reduce.
    static = torch.ones(4096, device=dev)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        dist.all_reduce(static)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    static.fill_(1)
    with torch.cuda.graph(graph):
        dist.all_reduce(static)
    for _ in range(3):
        static.fill_(1)
        graph.replay()
        torch.cuda.synchronize()
        check("all_reduce in a CUDA graph", static, torch.full((4096,), float(world)))

    if rank == 0:
        print(f"{passed} passed, {failed} failed", flush=True)
    dist.destroy_process_group()
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
