"""A PyTorch reference of weft.ep's routing, on the CPU: what every rank must receive from a
dispatch and get back from a combine, computed from every rank's inputs (each rank rebuilds
them from a seed, so no communication is needed). Shared by ``python -m weft.bench_ep --check``
and scripts/python-ep-test.py.

The inputs are exact by construction: values are small integers and each 128-channel block's
largest magnitude is 4 (E4M3 holds them exactly after scaling), weights are powers of two, so
every sum is exact and a result must match the reference bit for bit. Imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_BLOCK_MAX = 4.0  # every 128-channel block's largest magnitude
FP8_SCALE = 448.0 / FP8_BLOCK_MAX


@dataclass
class Inputs:
    """One rank's routing and tokens (CPU tensors)."""

    topk_idx: torch.Tensor  # int64 [T, K], distinct experts per token, some slots -1
    topk_weights: torch.Tensor  # float32 [T, K], powers of two
    x: torch.Tensor  # float32 [T, H], small integers
    bias: torch.Tensor  # float32 [biases, T, H], small integers


def inputs(
    seed: int, tokens: int, hidden: int, topk: int, num_experts: int, drop: float = 0.1, biases: int = 2
) -> Inputs:
    """Random exact inputs: ``topk`` distinct experts per token with about ``drop`` of the slots
    -1, weights of 1/4, 1/2 or 1, values in {0, ±1, ±2, ±4} with 4 at each block's start, and
    ``biases`` bias tensors of values in -2..2."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.rand(tokens, num_experts, generator=g).topk(topk, dim=1).indices
    idx[torch.rand(tokens, topk, generator=g) < drop] = -1
    weights = torch.tensor([0.25, 0.5, 1.0])[torch.randint(0, 3, (tokens, topk), generator=g)]
    x = torch.tensor([0.0, 1, -1, 2, -2, 4, -4])[torch.randint(0, 7, (tokens, hidden), generator=g)]
    x[:, ::128] = FP8_BLOCK_MAX
    bias = torch.randint(-2, 3, (biases, tokens, hidden), generator=g).float()
    return Inputs(idx, weights, x, bias)


def fp8(x: torch.Tensor):
    """DeepEP's FP8 form of ``x`` (blocks of largest magnitude 4): E4M3 values and one float32
    scale per 128 channels, as weft's kernels store it (amax / 448)."""
    scale_inv = torch.tensor(FP8_BLOCK_MAX) / torch.tensor(448.0)
    scales = torch.full((x.shape[0], x.shape[1] // 128), float(scale_inv), dtype=torch.float32, device=x.device)
    return (x * FP8_SCALE).to(torch.float8_e4m3fn), scales


def in_rank(topk_idx: torch.Tensor, num_ranks: int, local: int) -> torch.Tensor:
    """``is_token_in_rank``: bool [T, R], whether a token has an expert on each rank."""
    rank_of = torch.where(topk_idx >= 0, topk_idx // local, -1)
    return torch.stack([(rank_of == r).any(dim=1) for r in range(num_ranks)], dim=1)


@dataclass
class Dispatched:
    """What ``rank`` receives from a normal-mode dispatch, rows by source rank then token."""

    x: torch.Tensor  # float32 [N, H]
    topk_idx: torch.Tensor  # int64 [N, K], local expert indices, -1 for other ranks' experts
    topk_weights: torch.Tensor  # float32 [N, K], 0 where topk_idx is -1
    src_idx: torch.Tensor  # int32 [N], each row's token on its source rank
    rank_prefix_matrix: torch.Tensor  # int32 [R, R]
    per_local_expert: list  # rows per local expert (before the alignment)


def dispatch(everyone: list[Inputs], rank: int, num_experts: int) -> Dispatched:
    ranks = len(everyone)
    local = num_experts // ranks
    masks = [in_rank(i.topk_idx, ranks, local) for i in everyone]
    sent = [m[:, rank] for m in masks]
    idx = torch.cat([i.topk_idx[s] for i, s in zip(everyone, sent)])
    mine = (idx >= rank * local) & (idx < (rank + 1) * local)
    counts = torch.tensor([[int(m[:, d].sum()) for d in range(ranks)] for m in masks], dtype=torch.int32)
    local_idx = torch.where(mine, idx - rank * local, -1)
    return Dispatched(
        x=torch.cat([i.x[s] for i, s in zip(everyone, sent)]),
        topk_idx=local_idx,
        topk_weights=torch.where(mine, torch.cat([i.topk_weights[s] for i, s in zip(everyone, sent)]), 0.0),
        src_idx=torch.cat([s.nonzero().flatten() for s in sent]).int(),
        rank_prefix_matrix=counts.cumsum(0).int(),
        per_local_expert=[int((local_idx == j).any(dim=1).sum()) for j in range(local)],
    )


def combine(mine: Inputs, num_ranks: int, num_experts: int) -> torch.Tensor:
    """The combined tokens of a rank when every rank r's expert output is its received rows
    times (r + 1): x times the sum of (r + 1) over the ranks a token went to, plus its biases."""
    mask = in_rank(mine.topk_idx, num_ranks, num_experts // num_ranks)
    factor = (mask.float() * torch.arange(1, num_ranks + 1).float()).sum(1, keepdim=True)
    return mine.x * factor + mine.bias.sum(0)


def combined_weights(mine: Inputs) -> torch.Tensor:
    """The top-k weights a combine returns: the sent weights, 0 where the slot is -1."""
    return torch.where(mine.topk_idx >= 0, mine.topk_weights, 0.0)


def low_latency_rows(everyone: list[Inputs], expert: int):
    """The rows ``expert`` receives in a low-latency dispatch, by source rank then token:
    ``(x [n, H], src_idx [n] int32, per_source [R] counts)``."""
    chosen = [(i.topk_idx == expert).any(dim=1) for i in everyone]
    return (
        torch.cat([i.x[c] for i, c in zip(everyone, chosen)]),
        torch.cat([c.nonzero().flatten() for c in chosen]).int(),
        [int(c.sum()) for c in chosen],
    )


def low_latency_combine(mine: Inputs, local: int) -> torch.Tensor:
    """The low-latency combine of ``mine``'s tokens when local expert j's output is its rows
    times (j + 1): the sum over a token's slots of weight × x × (expert % local + 1)."""
    idx, weights = mine.topk_idx, mine.topk_weights
    per_slot = torch.where(idx >= 0, weights * (idx % local + 1).float(), 0.0)
    return mine.x * per_slot.sum(1, keepdim=True)


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bits as integers, for the types whose NaN or negative zero == would miss."""
    if t.dtype in (torch.float8_e4m3fn, torch.bfloat16, torch.float32):
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])
    return t


def mismatch(got: torch.Tensor, want: torch.Tensor) -> str:
    """Why ``got`` is not ``want`` bit for bit (dtype, shape, or how many elements differ), or
    ``""`` when it is. Compared on ``got``'s device."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype} {list(got.shape)}, want {want.dtype} {list(want.shape)}"
    differ = int((bits(got) != bits(want.to(got.device))).sum())
    return f"{differ} of {got.numel()} elements differ" if differ else ""
