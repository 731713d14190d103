"""``python -m e2e.tp_decode`` under torchrun (one process per GPU, every GPU one
tensor-parallel rank): the decode step of Llama 3.1 layers through each backend.

    PYTHONPATH=bench torchrun --nproc-per-node 2 -m e2e.tp_decode --backends nccl,weft-python --json tp.json
    PYTHONPATH=bench LD_PRELOAD=$PWD/target/nccl/libnccl.so.2 torchrun --nproc-per-node 2 \\
        -m e2e.tp_decode --backends weft-nccl --json tp-weft-nccl.json

Per model and batch size: the step (one block's shard applied ``--layers`` times, each block
ending its attention and its MLP with an AllReduce) is captured in a CUDA graph per backend,
replayed twice (the outputs must be equal bit for bit, and equal on every rank), checked on rank
0 against the unsharded step in float32 (and the unsharded step in BF16, whose error sets the
tolerance), then timed over ``--iters`` replays (the slowest rank's median). The same step
without its AllReduces, captured and timed alike, is the compute the communication adds to.
Rank 0 prints a line per row and writes ``--json``; the exit status is 1 when a check failed.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from . import gpu, llama
from .cli import tp_args
from .results import Check, TpRow, document, with_check, write
from .shapes import LLAMA


class Backend:
    """How one backend sums a row-parallel output over the ranks, and the buffer it sums in."""

    def __init__(self, name: str, buffer: torch.Tensor, comm=None):
        self.name, self.buffer, self.comm, self.window = name, buffer, comm, None
        if name == "weft-python":
            self.window = register(comm, buffer)

    @property
    def windows(self) -> bool:
        return self.window is not None

    def reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.comm is None:
            dist.all_reduce(t)
        else:
            self.comm.all_reduce(t)
        return t

    def release(self) -> None:
        if self.window is not None:
            self.comm.deregister_window(self.window)
            self.window = None


def register(comm, buffer: torch.Tensor):
    """``buffer`` as a weft window, or ``None`` (with the reason on rank 0) when weft cannot map
    it; registration fails on every rank alike."""
    import weft

    try:
        return comm.register_window(buffer)
    except (weft.WeftError, ValueError) as e:
        if dist.get_rank() == 0:
            print(f"tp_decode: weft-python without a window: {e}", flush=True)
        return None


def check_library(backends: list[str]) -> None:
    """The torch.distributed backends name the library this process loaded."""
    preloaded = "libnccl" in os.environ.get("LD_PRELOAD", "")
    if "weft-nccl" in backends and not preloaded:
        raise SystemExit("tp_decode: --backends weft-nccl needs weft's libnccl.so.2 in LD_PRELOAD")
    if "nccl" in backends and preloaded:
        raise SystemExit("tp_decode: --backends nccl with a libnccl.so.2 in LD_PRELOAD: run it in a launch without")


def capture(step, x: torch.Tensor):
    """``step(x)`` run once eagerly on a side stream (communicators, kernels and staging set up
    outside the capture), then captured: ``(graph, output)``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step(x)
    return graph, y


class Run:
    """One launch: its arguments, rank and the weft communicator its weft-python backends use."""

    def __init__(self, args, rank: int, ranks: int, device: torch.device):
        self.args, self.rank, self.ranks, self.device = args, rank, ranks, device
        self.comm = None
        if any(b.startswith("weft-python") for b in args.backends):
            import weft

            self.comm = weft.Communicator.from_process_group()
            self.comm.prepare(torch.bfloat16)
        self.failed = 0

    def model(self, key: str) -> list[TpRow]:
        args, model = self.args, LLAMA[key]
        layers = args.layers or model.layers
        drawn = llama.draw(model, args.seed, self.device)
        shard = llama.shard(model, drawn, self.ranks, self.rank)
        whole = llama.shard(model, drawn, 1, 0) if args.check and self.rank == 0 else None
        del drawn
        gpu.free()
        numel = max(args.batches) * model.hidden
        plain = torch.empty(numel, dtype=torch.bfloat16, device=self.device)
        backends = [
            Backend(name, torch.empty(numel, dtype=torch.bfloat16, device=self.device),
                    self.comm if name.startswith("weft-python") else None)
            for name in args.backends
        ]
        rows = []
        try:
            for batch in args.batches:
                rows += self.batch(key, layers, shard, whole, batch, plain, backends)
        finally:
            for b in backends:
                b.release()
        return rows

    def batch(self, key, layers, shard, whole, batch, plain, backends) -> list[TpRow]:
        args, model, rank = self.args, LLAMA[key], self.rank
        share = model.shard(self.ranks)
        full_cache = llama.draw_cache(model, batch, args.context, args.seed + 10_000 + 2 * batch, self.device)
        x = gpu.randn((batch, model.hidden), args.seed + 20_000 + batch, self.device)
        cache = full_cache.heads(rank * share.kv_heads, share.kv_heads)
        ref, bf16_err = None, None
        if whole is not None:
            ref, one_gpu = llama.reference(model, whole, x, full_cache, layers)
            bf16_err = gpu.max_error(one_gpu, ref)
            del one_gpu
        del full_cache
        gpu.free()
        compute = self.time(llama.Step(model, shard, cache, layers, plain), x)[0]
        rows = []
        for b in backends:
            stats, out, deterministic = self.time(llama.Step(model, shard, cache, layers, b.buffer, b.reduce), x)
            everyone = gpu.host_gather(gpu.digest(out))
            ranks_equal = all(sha == everyone[0] for sha in everyone)
            check = None
            if ref is not None:
                check = Check(gpu.max_error(out, ref), float(ref.abs().max()), bf16_err, deterministic)
            row = TpRow(
                model=key, tp=self.ranks, batch=batch, layers=layers, context=args.context, backend=b.name,
                step_us=stats.median_us, step_min_us=stats.min_us, step_max_us=stats.max_us,
                compute_us=compute.median_us, allreduce_bytes=share.allreduce_bytes(batch), windows=b.windows,
                output_sha=everyone[0], ranks_equal=ranks_equal,
            )
            row = with_check(row, check)
            if row.passed is not None:
                row.passed = row.passed and ranks_equal
            rows.append(row)
            self.report(row)
            del out
            gpu.free()
        return rows

    def time(self, step, x: torch.Tensor):
        """``(slowest rank's stats, first replay's output, whether two replays agreed bit for
        bit on every rank)`` of ``step`` captured in a graph."""
        gpu.host_barrier()  # rank 0 may come from the reference
        graph, y = capture(step, x)
        graph.replay()
        first = y.clone()
        graph.replay()
        deterministic = gpu.every_rank(gpu.bitwise_equal(first, y))
        samples = gpu.time_calls(graph.replay, self.args.warmup, self.args.iters)
        del graph, y
        return gpu.slowest_stats(samples), first, deterministic

    def report(self, row: TpRow) -> None:
        self.failed += row.passed is False
        if self.rank == 0:
            print(row.summary(), flush=True)


def main(argv=None) -> int:
    rank, ranks, device = gpu.init()
    args = tp_args(argv, ranks)
    check_library(args.backends)
    run = Run(args, rank, ranks, device)
    rows = []
    for key in args.models:
        rows += run.model(key)
    if rank == 0 and args.json:
        write(args.json, document("tp-decode", gpu.meta(ranks, device, args), rows))
    failed = run.failed
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
