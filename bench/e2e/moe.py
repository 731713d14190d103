"""DeepSeek-V3's MoE layer in PyTorch, the parts every expert-parallel variant shares: the
router (sigmoid scores, group-limited top-k, normalised weights times the routed scaling), the
shared expert, the routed experts' grouped GEMMs on this rank's experts, and the single-GPU
reference of the whole layer (every expert) in float32 and in BF16.

Weights are random with the real shapes (normal, scaled by 1/sqrt(fan-in)); expert ``e`` is
drawn from the seed and ``e`` alone, so the rank that holds it and rank 0's reference agree."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import gpu
from .shapes import MoE

# Seed offsets of the router, the shared expert and expert e (EXPERT_SEED + 2 e, + 1).
ROUTER_SEED, SHARED_SEED, EXPERT_SEED = 0, 10, 1000


def expert(model: MoE, e: int, seed: int, device: torch.device, dtype=torch.bfloat16):
    """Routed expert ``e``'s ``(gate_up [2 I, H], down [H, I])`` (``torch.nn.Linear`` layout)."""
    h, i = model.hidden, model.expert_intermediate
    s = seed + EXPERT_SEED + 2 * e
    return (gpu.randn((2 * i, h), s, device, 1 / math.sqrt(h), dtype),
            gpu.randn((h, i), s + 1, device, 1 / math.sqrt(i), dtype))


@dataclass
class Weights:
    """What one rank holds: the router and the shared expert (replicated) and its routed
    experts, stacked for the grouped GEMM."""

    router: torch.Tensor  # [E, H] float32
    router_bias: torch.Tensor  # [E] float32 (the score correction bias)
    shared_gate_up: torch.Tensor  # [2 I_shared, H]
    shared_down: torch.Tensor  # [H, I_shared]
    gate_up: torch.Tensor  # [local experts, 2 I, H]
    down: torch.Tensor  # [local experts, H, I]


def draw(model: MoE, ranks: int, rank: int, seed: int, device: torch.device) -> Weights:
    h, s = model.hidden, model.shared_intermediate
    local = model.local_experts(ranks)
    experts = [expert(model, rank * local + j, seed, device) for j in range(local)]
    gate_up = torch.stack([gu for gu, _ in experts])
    down = torch.stack([d for _, d in experts])
    del experts
    return Weights(
        router=gpu.randn((model.experts, h), seed + ROUTER_SEED, device, 1 / math.sqrt(h), torch.float32),
        router_bias=gpu.randn((model.experts,), seed + ROUTER_SEED + 1, device, 0.01, torch.float32),
        shared_gate_up=gpu.randn((2 * s, h), seed + SHARED_SEED, device, 1 / math.sqrt(h)),
        shared_down=gpu.randn((h, s), seed + SHARED_SEED + 1, device, 1 / math.sqrt(s)),
        gate_up=gate_up,
        down=down,
    )


def route(model: MoE, w: Weights, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's routing of ``x``: ``(topk_idx int64 [T, K], topk_weights float32 [T, K])``.
    Scores are sigmoids of the router's logits (float32); each group of experts is ranked by its
    two best biased scores, the best ``topk_groups`` groups are kept, the ``topk`` best biased
    scores among their experts are chosen, and their unbiased scores, normalised to sum 1, times
    ``routed_scaling`` are the weights."""
    tokens, experts, groups = x.shape[0], model.experts, model.groups
    scores = F.linear(x.float(), w.router).sigmoid()
    biased = scores + w.router_bias
    group_scores = biased.view(tokens, groups, experts // groups).topk(2, dim=-1).values.sum(-1)
    best = group_scores.topk(model.topk_groups, dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    biased = biased.masked_fill(~keep.repeat_interleave(experts // groups, dim=1), float("-inf"))
    idx = biased.topk(model.topk, dim=-1).indices
    weights = scores.gather(1, idx)
    return idx, weights / weights.sum(-1, keepdim=True) * model.routed_scaling


def swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, down)


def shared(w: Weights, x: torch.Tensor) -> torch.Tensor:
    return swiglu(x, w.shared_gate_up, w.shared_down)


def loop_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Group g's rows ``[offs[g-1], offs[g])`` of ``a`` times ``b[g]``, one matmul per group
    (reads the offsets on the host); rows past the last group stay zero."""
    out = a.new_zeros(a.shape[0], b.shape[2])
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            torch.mm(a[start:end], b[g], out=out[start:end])
        start = end
    return out


class GroupedMM:
    """The routed experts' GEMMs: torch's grouped GEMM (one launch for every expert, no host
    sync) when this torch has one and it agrees with a loop of matmuls on this GPU (empty
    groups and rows past the last group included), else the loop."""

    def __init__(self, device: torch.device):
        self.fn, self.name = None, "loop over experts"
        for owner, attr in ((F, "grouped_mm"), (torch, "_grouped_mm")):
            fn = getattr(owner, attr, None)
            if fn is None:
                continue
            why = self._disagreement(fn, device)
            if why is None:
                self.fn, self.name = fn, f"{owner.__name__}.{attr}"
                return
            self.name = f"loop over experts ({owner.__name__}.{attr}: {why})"

    @staticmethod
    def _disagreement(fn, device: torch.device) -> str | None:
        a = gpu.randn((48, 64), 7, device)
        b = gpu.randn((3, 32, 64), 8, device).transpose(1, 2)  # [groups, K, N], stored [groups, N, K]
        offs = torch.tensor([8, 8, 40], dtype=torch.int32, device=device)
        try:
            got = fn(a, b, offs=offs)[:40].float()
        except (RuntimeError, TypeError, ValueError) as e:
            return f"{type(e).__name__}: {str(e).splitlines()[0]}"
        want = loop_mm(a.float(), b.float(), offs)[:40]
        err = float((got - want).abs().max())
        return None if err <= 2**-6 * float(want.abs().max()) else f"differs from a loop by {err:.3g}"

    def __call__(self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return self.fn(a, b, offs=offs) if self.fn is not None else loop_mm(a, b, offs)


def experts(w: Weights, mm: GroupedMM, a: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The local experts on ``a`` (rows grouped by expert, ``offs`` the int32 end of each
    group): ``[rows, H]`` BF16, rows past the last group undefined."""
    gate, up = mm(a, w.gate_up.transpose(1, 2), offs).chunk(2, dim=-1)
    return mm(F.silu(gate) * up, w.down.transpose(1, 2), offs)


def experts_on_rows(w: Weights, mm: GroupedMM, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor):
    """The routed part of each received row: ``x [N, H]`` with its local expert slots ``idx
    [N, K]`` (-1 for other ranks' experts) and ``weights [N, K]`` (0 there) -> ``[N, H]``, the
    weighted sum over the row's local experts. Reads the number of (row, expert) pairs on the
    host (its callers already synchronised with it)."""
    rows, k = idx.shape
    local = w.gate_up.shape[0]
    slot = idx.flatten()
    key = torch.where(slot >= 0, slot, local)
    order = torch.argsort(key, stable=True)  # pairs by expert, the empty slots last
    offs = torch.bincount(key, minlength=local + 1)[:local].cumsum(0).to(torch.int32)
    pairs = int(offs[-1])
    if pairs == 0:
        return x.new_zeros(x.shape)
    order = order[:pairs]
    y = experts(w, mm, x.index_select(0, order // k), offs)
    # Each pair's output in its (row, slot) place, then the weighted sum over the slots: one
    # batched GEMV, in a fixed order (deterministic).
    placed = y.new_zeros(rows * k, y.shape[1]).index_copy_(0, order, y)
    return torch.bmm(weights.to(y.dtype).reshape(rows, 1, k), placed.view(rows, k, -1)).view(rows, -1)


def experts_on_slots(w: Weights, mm: GroupedMM, recv: torch.Tensor, counts: torch.Tensor, bound: int) -> torch.Tensor:
    """The local experts on the low-latency layout: ``recv [L, M, H]`` whose expert j has its
    first ``counts[j]`` rows filled -> the same layout of outputs (other rows undefined). At most
    ``bound`` rows in all; no host sync (the rows are found with a search on the GPU)."""
    local, slots, hidden = recv.shape
    counts = counts.long()
    ends = counts.cumsum(0)
    p = torch.arange(bound, device=recv.device)
    e = torch.searchsorted(ends, p, right=True)  # each packed row's expert; `local` past the end
    valid = e < local
    e = e.clamp(max=local - 1)
    src = torch.where(valid, e * slots + p - (ends - counts)[e], 0)
    y = experts(w, mm, recv.view(local * slots, hidden).index_select(0, src), ends.to(torch.int32))
    # Back to the slots; the rows past the end all go to one spare row.
    out = y.new_empty(local * slots + 1, hidden)
    out.index_copy_(0, torch.where(valid, src, local * slots), y)
    return out[: local * slots].view(local, slots, hidden)


def reference(model: MoE, w: Weights, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor, seed: int):
    """The whole layer on this GPU for tokens ``x`` routed as ``idx``/``weights`` (every rank's,
    concatenated): ``(float32 result, BF16 result)``. Every expert is drawn again from the seed;
    the BF16 result weights each expert's BF16 output by its BF16 weight, as the ranks do."""
    x32 = x.float()
    routed32 = torch.zeros_like(x32)
    routed16 = torch.zeros_like(x32)
    for e in range(model.experts):
        hit = idx == e
        rows = hit.any(1).nonzero().flatten()
        if rows.numel() == 0:
            continue
        weight = (weights * hit).sum(1).index_select(0, rows)[:, None]
        gate_up, down = expert(model, e, seed, x.device)
        routed32.index_add_(0, rows, weight * swiglu(x32.index_select(0, rows), gate_up.float(), down.float()))
        y16 = swiglu(x.index_select(0, rows), gate_up, down)
        routed16.index_add_(0, rows, weight.to(torch.bfloat16).float() * y16.float())
    shared32 = swiglu(x32, w.shared_gate_up.float(), w.shared_down.float())
    return shared32 + routed32, shared(w, x) + routed16.to(torch.bfloat16)
