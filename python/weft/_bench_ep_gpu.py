"""The GPU half of ``python -m weft.bench_ep`` (torch, torch.distributed, weft.ep): checks one
call of each operation against ``weft.ep.reference``, then times it."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

import weft.ep as deep_ep

from . import _bench
from ._torchrun import init_process_group
from .bench_ep import (
    Row, combine_bytes, dispatch_bytes, document, ll_combine_bytes, ll_dispatch_bytes, row, summarize, table,
)
from .ep import reference as ref


class CheckFailed(RuntimeError):
    pass


def expect(what: str, got, want) -> None:
    why = ref.mismatch(got, want)
    if why:
        raise CheckFailed(f"rank {dist.get_rank()}: {what}: {why}")


def time_calls(call, warmup: int, iters: int) -> list[float]:
    """µs of each of ``iters`` calls after ``warmup``, each between two events on the current
    stream (DeepEP's calls order themselves after it and it after them)."""

    def settle():
        dist.barrier()
        torch.cuda.synchronize()

    return _bench.time_calls(call, warmup, iters, settle)


def normal_mode(args, group, rank: int, ranks: int, dev) -> list[Row]:
    everyone = [ref.inputs(100 + r, args.num_tokens, args.hidden, args.num_topk, args.num_experts, 0.0, 0)
                for r in range(ranks)]
    mine = everyone[rank]
    want = ref.dispatch(everyone, rank, args.num_experts) if args.check else None
    topk_idx, topk_weights = mine.topk_idx.to(dev), mine.topk_weights.to(dev)
    x_bf16 = mine.x.to(dev, torch.bfloat16)
    payloads = {"bf16": x_bf16, "fp8": ref.fp8(mine.x.to(dev))}
    nvl = deep_ep.nvl_bytes_hint(args.num_tokens, args.hidden, args.num_topk, ranks)
    buffer = deep_ep.Buffer(group, num_nvl_bytes=nvl)
    layout = buffer.get_dispatch_layout(topk_idx, args.num_experts)
    rows = []
    for num_sms in args.num_sms:
        config = deep_ep.Config(num_sms)
        for payload in ("fp8", "bf16"):
            x = payloads[payload]
            recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
                x, num_tokens_per_rank=layout[0], is_token_in_rank=layout[3], num_tokens_per_expert=layout[2],
                topk_idx=topk_idx, topk_weights=topk_weights, config=config,
            )
            values = recv_x[0] if payload == "fp8" else recv_x
            received = values.shape[0]
            if args.check:
                what = f"dispatch {payload} {num_sms} SMs"
                if payload == "fp8":
                    want_q, want_scales = ref.fp8(want.x)
                    expect(f"{what}: recv_x", values, want_q)
                    expect(f"{what}: recv_x_scales", recv_x[1], want_scales)
                else:
                    expect(f"{what}: recv_x", values, want.x.bfloat16())
                expect(f"{what}: recv_topk_idx", recv_idx, want.topk_idx)
                expect(f"{what}: recv_topk_weights", recv_w, want.topk_weights)
                expect(f"{what}: recv_src_idx", handle[3], want.src_idx)
                cached = buffer.dispatch(x, handle=handle, config=config)[0]
                expect(f"cached {what}: recv_x", cached[0] if payload == "fp8" else cached, values)
            samples = time_calls(lambda: buffer.dispatch(x, handle=handle, config=config), args.warmup, args.iters)
            rows.append(row(rank, "dispatch", payload, num_sms, received,
                            dispatch_bytes(received, args.hidden, payload == "fp8"), summarize(samples), args.check))
        # Combine the BF16 dispatch's rows, each rank's expert output its rows times (rank + 1).
        expert_out = (recv_x.float() * (rank + 1)).bfloat16()
        if args.check:
            combined, combined_w, _ = buffer.combine(expert_out, handle, topk_weights=recv_w, config=config)
            expect(f"combine {num_sms} SMs: combined_x", combined, ref.combine(mine, ranks, args.num_experts).bfloat16())
            expect(f"combine {num_sms} SMs: combined_topk_weights", combined_w, ref.combined_weights(mine))
        samples = time_calls(lambda: buffer.combine(expert_out, handle, config=config), args.warmup, args.iters)
        rows.append(row(rank, "combine", "bf16", num_sms, received, combine_bytes(received, args.hidden),
                        summarize(samples), args.check))
    return rows


def low_latency_mode(args, group, rank: int, ranks: int, dev) -> list[Row]:
    tokens, experts, hidden = args.ll_tokens, args.num_experts, args.hidden
    local = experts // ranks
    everyone = [ref.inputs(200 + r, tokens, hidden, args.num_topk, experts, 0.01, 0) for r in range(ranks)]
    mine = everyone[rank]
    topk_idx, topk_weights, x = mine.topk_idx.to(dev), mine.topk_weights.to(dev), mine.x.to(dev, torch.bfloat16)
    selections = int((mine.topk_idx >= 0).sum())
    rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, ranks, experts)
    buffer = deep_ep.Buffer(group, 0, rdma, low_latency_mode=True, num_qps_per_rank=local)
    rows = []
    for num_sms in args.num_sms:
        deep_ep.Buffer.set_num_sms(num_sms)
        dispatch = lambda: buffer.low_latency_dispatch(x, topk_idx, tokens, experts, use_fp8=True)  # noqa: E731
        (recv_x, recv_scales), recv_count, handle, _, _ = dispatch()
        if args.check:
            torch.cuda.synchronize()
            what = f"low-latency dispatch {num_sms} SMs"
            for j in range(local):
                want_x, want_src, _ = ref.low_latency_rows(everyone, rank * local + j)
                n = want_x.shape[0]
                expect(f"{what}: recv_count[{j}]", recv_count[j : j + 1].int(), torch.tensor([n], dtype=torch.int32))
                want_q, want_scales = ref.fp8(want_x)
                expect(f"{what}: recv_x[{j}]", recv_x[j, :n], want_q)
                expect(f"{what}: recv_x_scales[{j}]", recv_scales[j, :n], want_scales)
                expect(f"{what}: src_info[{j}]", handle[0][j, :n], want_src)
        samples = time_calls(dispatch, args.warmup, args.iters)
        rows.append(row(rank, "ll-dispatch", "fp8", num_sms, selections, ll_dispatch_bytes(selections, hidden, True),
                        summarize(samples), args.check))
        # Combine a fresh dispatch's rows, local expert j's output its rows times (j + 1).
        (recv_x, recv_scales), _, handle, _, _ = dispatch()
        rows_x = recv_x.float() * recv_scales.repeat_interleave(128, dim=2)
        factors = torch.arange(1, local + 1, device=dev, dtype=torch.float32).view(local, 1, 1)
        expert_out = (rows_x * factors).bfloat16()
        combine = lambda: buffer.low_latency_combine(expert_out, topk_idx, topk_weights, handle)  # noqa: E731
        if args.check:
            want = ref.low_latency_combine(mine, local).bfloat16()
            expect(f"low-latency combine {num_sms} SMs: combined_x", combine()[0], want)
        samples = time_calls(combine, args.warmup, args.iters)
        rows.append(row(rank, "ll-combine", "bf16", num_sms, selections, ll_combine_bytes(selections, hidden),
                        summarize(samples), args.check))
    return rows


def run(args) -> int:
    rank, ranks, dev = init_process_group()
    group = dist.new_group(list(range(ranks)))
    try:
        rows = normal_mode(args, group, rank, ranks, dev)
        if args.ll_tokens:
            rows += low_latency_mode(args, group, rank, ranks, dev)
    except CheckFailed as e:
        print(f"weft.bench_ep: {e}", flush=True)
        dist.destroy_process_group()
        return 1
    everyone = [None] * ranks
    dist.all_gather_object(everyone, rows)
    rows = sorted((r for part in everyone for r in part), key=lambda r: (r.op.startswith("ll-"), r.num_sms, r.rank))
    if rank == 0:
        print(f"weft.bench_ep: {ranks} ranks, {args.num_tokens} tokens per rank (low latency {args.ll_tokens}), "
              f"hidden {args.hidden}, top-{args.num_topk}, {args.num_experts} experts; "
              f"{'every element checked first; ' if args.check else ''}DeepEP's GB/s over the median")
        print(table(rows), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(document(args, ranks, rows), f, indent=1)
    dist.destroy_process_group()
    return 0
