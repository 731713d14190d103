#!/usr/bin/env python3
"""torch.distributed.all_reduce latency (bf16 sum, CUDA-graph mode) through whichever
libnccl.so.2 the process loads: run it twice, once with weft's library preloaded, to compare
weft and NCCL from one script (scripts/torch-nccl-compare.sh does both and prints the ratio).

    torchrun --nproc-per-node 4 scripts/torch-allreduce-bench.py            # the real NCCL
    LD_PRELOAD=$PWD/target/nccl/libnccl.so.2 torchrun ... torch-allreduce-bench.py

Rank 0 prints one JSON object per size: {"bytes": ..., "us": ...} (per call, 20 calls captured
in one graph, the graph replayed 5 times after a warm-up replay; the slowest rank's time).
Keep NVLink multicast off (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
"""

import json
import os

import torch
import torch.distributed as dist

CALLS, REPLAYS = 20, 5


def main() -> None:
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    size = 1 << 10
    while size <= 256 << 20:
        t = torch.ones(size // 2, dtype=torch.bfloat16, device=dev)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            dist.all_reduce(t)  # warm-up outside the capture (communicator, kernels)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS):
                dist.all_reduce(t)
        graph.replay()
        torch.cuda.synchronize()
        dist.barrier(device_ids=[local])
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        us = torch.tensor([start.elapsed_time(end) * 1e3 / (CALLS * REPLAYS)], device=dev)
        dist.all_reduce(us, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(json.dumps({"bytes": size, "us": round(us.item(), 2)}), flush=True)
        del graph
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
