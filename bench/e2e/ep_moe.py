"""``python -m e2e.ep_moe`` under torchrun (one process per GPU, every GPU one expert-parallel
rank): DeepSeek-V3's MoE layer through each variant.

    PYTHONPATH=bench torchrun --nproc-per-node 2 -m e2e.ep_moe --json ep.json

A layer: the router, the shared expert, the dispatch of every token to the ranks of its
experts, the routed experts' grouped GEMMs, the combine back, and the sum of the shared and
routed parts. Each variant overlaps what a DeepEP user overlaps: the shared expert runs on the
compute stream while the dispatch runs on a communication stream.

- ``weft-normal``: ``weft.ep`` normal mode (layout, dispatch, combine; BF16), as DeepEP's users
  call it, the shared expert between the routing's event and the dispatch's.
- ``weft-ll``: ``weft.ep`` low-latency mode (BF16 dispatch, weighted combine; no host sync;
  decode only: its buffers hold ``--decode-tokens`` per rank).
- ``all-to-all``: ``torch.distributed.all_to_all_single`` over NCCL, as a PyTorch model without
  DeepEP does it: the counts exchanged and read on the host, each token sent once to each rank
  that has one of its experts with its routing, the expert outputs sent back and summed.

Per phase (prefill ``--prefill-tokens``, decode ``--decode-tokens`` per rank) and variant: two
layers on the same inputs must agree bit for bit; every rank's output is checked on rank 0
against the single-GPU float32 reference of the whole layer (every expert, each rank's
routing), the tolerance set by the same layer in BF16 on one GPU; then the layer, the dispatch
alone, the combine alone and the compute alone (router, shared and routed experts) are timed
(``--iters`` runs after ``--warmup``, the slowest rank's median). Rank 0 prints a line per row
and writes ``--json``; the exit status is 1 when a check failed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import gpu, moe
from .cli import ep_args, phase_tokens
from .results import Check, EpRow, document, with_check, write
from .shapes import DEEPSEEK_V3


class Variant:
    """What every variant shares: the model, this rank's weights and the experts' GEMMs. A
    variant adds ``dispatch``, ``experts`` (on what it received), ``combine`` and ``layer``."""

    name = ""

    def __init__(self, w: moe.Weights, mm: moe.GroupedMM, ranks: int):
        self.model, self.w, self.mm, self.ranks = DEEPSEEK_V3, w, mm, ranks
        self.local = self.model.local_experts(ranks)

    def route(self, x: torch.Tensor):
        return moe.route(self.model, self.w, x)

    def compute(self, x: torch.Tensor, state) -> None:
        """The layer's compute without its communication (timed alone)."""
        self.route(x)
        moe.shared(self.w, x)
        self.experts(state)


@dataclass
class Received:
    """Rows a rank received, each once, with its local expert slots (-1 elsewhere) and their
    weights (0 elsewhere); and what the combine needs to send them back."""

    x: torch.Tensor
    idx: torch.Tensor
    weights: torch.Tensor
    back: object


class AllToAll(Variant):
    name = "all-to-all"

    def __init__(self, *args):
        super().__init__(*args)
        self.stream = torch.cuda.Stream()

    def dispatch(self, x, idx, weights) -> Received:
        tokens, k = idx.shape
        dest = idx // self.local
        in_rank = torch.zeros(tokens, self.ranks, dtype=torch.bool, device=x.device).scatter_(1, dest, True)
        send = in_rank.sum(0)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send)
        send_split, recv_split = send.tolist(), recv.tolist()
        pick = in_rank.t().nonzero()  # (destination, token), by destination then token
        to_rank, token = pick[:, 0], pick[:, 1]
        chosen = idx.index_select(0, token)
        theirs = chosen // self.local == to_rank[:, None]
        local_idx = torch.where(theirs, chosen % self.local, -1).float()
        meta = torch.cat([local_idx, torch.where(theirs, weights.index_select(0, token), 0.0)], dim=1)
        recv_x = x.new_empty(sum(recv_split), x.shape[1])
        dist.all_to_all_single(recv_x, x.index_select(0, token), recv_split, send_split)
        recv_meta = meta.new_empty(sum(recv_split), 2 * k)
        dist.all_to_all_single(recv_meta, meta, recv_split, send_split)
        back = (to_rank * tokens + token, send_split, recv_split, tokens)
        return Received(recv_x, recv_meta[:, :k].long(), recv_meta[:, k:], back)

    def experts(self, s: Received) -> torch.Tensor:
        return moe.experts_on_rows(self.w, self.mm, s.x, s.idx, s.weights)

    def combine(self, s: Received, rows: torch.Tensor) -> torch.Tensor:
        place, send_split, recv_split, tokens = s.back
        back = rows.new_empty(sum(send_split), rows.shape[1])
        dist.all_to_all_single(back, rows, send_split, recv_split)
        # Each rank's part of a token in its own place, summed in a fixed order.
        placed = rows.new_zeros(self.ranks * tokens, rows.shape[1]).index_copy_(0, place, back)
        return placed.view(self.ranks, tokens, -1).sum(0)

    def layer(self, x: torch.Tensor) -> torch.Tensor:
        idx, weights = self.route(x)
        routed = torch.cuda.Event()
        routed.record()
        shared = moe.shared(self.w, x)
        # The dispatch (and its host reads of the counts) waits for the routing only.
        self.stream.wait_event(routed)
        with torch.cuda.stream(self.stream):
            s = self.dispatch(x, idx, weights)
        torch.cuda.current_stream().wait_stream(self.stream)
        return shared + self.combine(s, self.experts(s))


class WeftNormal(Variant):
    name = "weft-normal"

    def __init__(self, w, mm, ranks, group, max_tokens: int, num_sms: int):
        super().__init__(w, mm, ranks)
        import weft.ep as deep_ep

        self.deep_ep = deep_ep
        m = self.model
        self.buffer = deep_ep.Buffer(group, num_nvl_bytes=deep_ep.nvl_bytes_hint(max_tokens, m.hidden, m.topk, ranks))
        self.config = deep_ep.Config(num_sms)

    def dispatch(self, x, idx, weights, previous=None) -> Received:
        """Layout and dispatch; with ``previous`` (an event) on the communication stream after
        it, the compute stream waiting at the end."""
        overlap = previous is not None
        per_rank, _, per_expert, in_rank, event = self.buffer.get_dispatch_layout(
            idx, self.model.experts, previous_event=previous, async_finish=overlap
        )
        recv_x, recv_idx, recv_w, _, handle, event = self.buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=idx, topk_weights=weights, config=self.config, previous_event=event if overlap else None,
            async_finish=overlap,
        )
        if overlap:
            event.current_stream_wait()
        return Received(recv_x, recv_idx, recv_w, handle)

    def experts(self, s: Received) -> torch.Tensor:
        return moe.experts_on_rows(self.w, self.mm, s.x, s.idx, s.weights)

    def combine(self, s: Received, rows: torch.Tensor) -> torch.Tensor:
        return self.buffer.combine(rows, s.back, config=self.config)[0]

    def layer(self, x: torch.Tensor) -> torch.Tensor:
        idx, weights = self.route(x)
        routed = self.deep_ep.Buffer.capture()
        # Launched before the dispatch, whose notify blocks the host: it runs while the
        # dispatch does, which waits for the routing only.
        shared = moe.shared(self.w, x)
        s = self.dispatch(x, idx, weights, previous=routed)
        return shared + self.combine(s, self.experts(s))


@dataclass
class Slots:
    """A low-latency dispatch's output: ``recv [local experts, ranks x max tokens, H]``, the
    rows each expert received, and what the combine needs."""

    recv: torch.Tensor
    count: torch.Tensor
    handle: object
    idx: torch.Tensor
    weights: torch.Tensor
    event: object


class WeftLowLatency(Variant):
    name = "weft-ll"

    def __init__(self, w, mm, ranks, group, max_tokens: int, num_sms: int):
        super().__init__(w, mm, ranks)
        import weft.ep as deep_ep

        m = self.model
        rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(max_tokens, m.hidden, ranks, m.experts)
        self.buffer = deep_ep.Buffer(group, 0, rdma, low_latency_mode=True, num_qps_per_rank=self.local)
        deep_ep.Buffer.set_num_sms(num_sms)
        self.max_tokens = max_tokens
        # The most (token, expert) pairs a rank can receive.
        self.bound = ranks * max_tokens * min(m.topk, self.local)

    def dispatch(self, x, idx, weights, overlap: bool = False) -> Slots:
        recv, count, handle, event, _ = self.buffer.low_latency_dispatch(
            x, idx, self.max_tokens, self.model.experts, use_fp8=False, async_finish=overlap
        )
        return Slots(recv, count, handle, idx, weights, event)

    def experts(self, s: Slots) -> torch.Tensor:
        return moe.experts_on_slots(self.w, self.mm, s.recv, s.count, self.bound)

    def combine(self, s: Slots, out: torch.Tensor) -> torch.Tensor:
        return self.buffer.low_latency_combine(out, s.idx, s.weights, s.handle)[0]

    def layer(self, x: torch.Tensor) -> torch.Tensor:
        idx, weights = self.route(x)
        # The dispatch first (it waits for the routing), then the shared expert meanwhile.
        s = self.dispatch(x, idx, weights, overlap=True)
        shared = moe.shared(self.w, x)
        s.event.current_stream_wait()
        return shared + self.combine(s, self.experts(s))


class Run:
    """One launch: the weights, the grouped GEMM and the variants, measured phase by phase."""

    def __init__(self, args, rank: int, ranks: int, device: torch.device):
        self.args, self.rank, self.ranks, self.device = args, rank, ranks, device
        self.w = moe.draw(DEEPSEEK_V3, ranks, rank, args.seed, device)
        self.mm = moe.GroupedMM(device)
        group = dist.new_group(list(range(ranks)))
        max_tokens = max(phase_tokens(args, p) for p in args.phases)
        common = (self.w, self.mm, ranks)
        self.variants = []
        for name in args.variants:
            if name == "all-to-all":
                self.variants.append(AllToAll(*common))
            elif name == "weft-normal":
                self.variants.append(WeftNormal(*common, group, max_tokens, args.num_sms))
            elif "decode" in args.phases:
                self.variants.append(WeftLowLatency(*common, group, args.decode_tokens, args.num_sms))
        self.failed = 0

    def phase(self, phase: str, index: int) -> list[EpRow]:
        args, model, rank = self.args, DEEPSEEK_V3, self.rank
        tokens = phase_tokens(args, phase)
        x = gpu.randn((tokens, model.hidden), args.seed + 30_000 + 100 * index + rank, self.device)
        ref = bf16_err = None
        if args.check:
            ref, bf16_err = self.reference(x)
        rows = []
        for v in self.variants:
            if v.name == "weft-ll" and phase != "decode":
                if rank == 0:
                    print(f"ep_moe: {phase}: weft-ll skipped (the low-latency mode serves decode batches)", flush=True)
                continue
            rows.append(self.measure(v, phase, tokens, x, ref, bf16_err))
            gpu.free()
        return rows

    def reference(self, x: torch.Tensor):
        """Every rank's tokens and routing gathered; on rank 0 ``(float32 reference, error of
        the BF16 layer on one GPU)``, elsewhere ``(None, None)``."""
        idx, weights = moe.route(DEEPSEEK_V3, self.w, x)
        everyone = [gather(t) for t in (x, idx, weights)]
        if self.rank != 0:
            return None, None
        ref, one_gpu = moe.reference(DEEPSEEK_V3, self.w, *everyone, self.args.seed)
        return ref, gpu.max_error(one_gpu, ref)

    def measure(self, v: Variant, phase: str, tokens: int, x, ref, bf16_err) -> EpRow:
        args = self.args

        def timed(call):
            return gpu.slowest_stats(gpu.time_calls(call, args.warmup, args.iters))

        gpu.host_barrier()  # rank 0 may come from the reference or the last check
        out = v.layer(x)
        again = v.layer(x)
        deterministic = gpu.every_rank(gpu.bitwise_equal(out, again))
        everyone = gather(out)
        check = None
        if ref is not None:
            check = Check(gpu.max_error(everyone, ref), float(ref.abs().max()), bf16_err, deterministic)
        del out, again, everyone
        layer = timed(lambda: v.layer(x))
        idx, weights = v.route(x)
        dispatch = timed(lambda: v.dispatch(x, idx, weights))
        state = v.dispatch(x, idx, weights)
        rows = v.experts(state)
        combine = timed(lambda: v.combine(state, rows))
        compute = timed(lambda: v.compute(x, state))
        row = EpRow(
            phase=phase, tokens=tokens, ranks=self.ranks, variant=v.name, layer_us=layer.median_us,
            layer_min_us=layer.min_us, layer_max_us=layer.max_us, dispatch_us=dispatch.median_us,
            combine_us=combine.median_us, compute_us=compute.median_us, num_sms=args.num_sms, grouped_mm=self.mm.name,
        )
        row = with_check(row, check)
        self.report(row)
        return row

    def report(self, row: EpRow) -> None:
        self.failed += row.passed is False
        if self.rank == 0:
            print(row.summary(), flush=True)


def gather(t: torch.Tensor) -> torch.Tensor:
    """Every rank's ``t`` (same shape on every rank), concatenated along the first dimension."""
    out = t.new_empty((dist.get_world_size() * t.shape[0], *t.shape[1:]))
    dist.all_gather_into_tensor(out, t.contiguous())
    return out


def main(argv=None) -> int:
    rank, ranks, device = gpu.init()
    args = ep_args(argv, ranks)
    run = Run(args, rank, ranks, device)
    if rank == 0:
        print(f"ep_moe: routed experts' GEMMs: {run.mm.name}", flush=True)
    rows = []
    for index, phase in enumerate(args.phases):
        rows += run.phase(phase, index)
    if rank == 0 and args.json:
        meta = gpu.meta(ranks, device, args)
        meta["grouped_mm"] = run.mm.name
        write(args.json, document("ep-moe", meta, rows))
    failed = run.failed
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
