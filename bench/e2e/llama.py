"""A Llama 3.1 decoder layer for one decode step, as a PyTorch model runs it under tensor
parallelism: RMSNorm, the column-parallel fused QKV projection, rotary embedding, the new
token's key and value written into the KV cache, grouped-query attention over the cache
(``scaled_dot_product_attention``), the row-parallel output projection and an AllReduce; then
RMSNorm, the column-parallel fused gate/up projection, SwiGLU, the row-parallel down projection
and an AllReduce. With one rank (``tp=1``) and no reduction it is the unsharded layer, which
also serves as the single-GPU reference (in float32).

Weights are random with the real shapes (normal, scaled by 1/sqrt(fan-in)), drawn whole from a
seed on every rank and sliced, so every rank's shard and rank 0's whole layer agree."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from . import gpu
from .shapes import Llama


@dataclass
class Weights:
    """One rank's shard of a layer (the whole layer when ``tp`` is 1). Projections are
    ``[out_features, in_features]``, as ``torch.nn.Linear`` keeps them."""

    attn_norm: torch.Tensor  # [hidden]
    qkv: torch.Tensor  # [(heads + 2 kv_heads) head_dim, hidden]: this rank's heads
    o: torch.Tensor  # [hidden, heads head_dim]: the matching input columns
    mlp_norm: torch.Tensor  # [hidden]
    gate_up: torch.Tensor  # [2 intermediate, hidden]: this rank's gate rows, then its up rows
    down: torch.Tensor  # [hidden, intermediate]
    heads: int
    kv_heads: int
    head_dim: int

    def to(self, dtype: torch.dtype) -> "Weights":
        names = ("attn_norm", "qkv", "o", "mlp_norm", "gate_up", "down")
        return replace(self, **{name: getattr(self, name).to(dtype) for name in names})


def draw(model: Llama, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The whole layer's BF16 weights, by name, from ``seed``."""
    h, d, i = model.hidden, model.head_dim, model.intermediate
    q, kv = model.heads * d, model.kv_heads * d
    shapes = {
        "q": (q, h), "k": (kv, h), "v": (kv, h), "o": (h, q),
        "gate": (i, h), "up": (i, h), "down": (h, i),
    }
    weights = {
        name: gpu.randn(shape, seed + n, device, 1 / math.sqrt(shape[1]))
        for n, (name, shape) in enumerate(shapes.items())
    }
    # RMSNorm gains near 1, as trained models have them.
    for n, name in enumerate(("attn_norm", "mlp_norm")):
        weights[name] = (1 + gpu.randn((h,), seed + 100 + n, device, 0.1, torch.float32)).to(torch.bfloat16)
    return weights


def shard(model: Llama, whole: dict[str, torch.Tensor], tp: int, rank: int) -> Weights:
    """Rank ``rank``'s shard of ``whole`` (``draw``'s weights) under ``tp``-way tensor
    parallelism: whole heads and a slice of the MLP."""
    s, d = model.shard(tp), model.head_dim
    q = slice(rank * s.heads * d, (rank + 1) * s.heads * d)
    kv = slice(rank * s.kv_heads * d, (rank + 1) * s.kv_heads * d)
    mlp = slice(rank * s.intermediate, (rank + 1) * s.intermediate)
    return Weights(
        attn_norm=whole["attn_norm"].clone(),
        qkv=torch.cat([whole["q"][q], whole["k"][kv], whole["v"][kv]]),
        o=whole["o"][:, q].contiguous(),
        mlp_norm=whole["mlp_norm"].clone(),
        gate_up=torch.cat([whole["gate"][mlp], whole["up"][mlp]]),
        down=whole["down"][:, mlp].contiguous(),
        heads=s.heads,
        kv_heads=s.kv_heads,
        head_dim=d,
    )


@dataclass
class Cache:
    """One layer's KV cache of a batch, this rank's key/value heads: ``[batch, kv_heads,
    context, head_dim]``; the decode step's token goes into the last position."""

    k: torch.Tensor
    v: torch.Tensor

    def heads(self, first: int, count: int) -> "Cache":
        return Cache(self.k[:, first : first + count].contiguous(), self.v[:, first : first + count].contiguous())


def draw_cache(model: Llama, batch: int, context: int, seed: int, device: torch.device) -> Cache:
    shape = (batch, model.kv_heads, context, model.head_dim)
    return Cache(gpu.randn(shape, seed, device), gpu.randn(shape, seed + 1, device))


def rope(model: Llama, position: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary embedding at ``position`` (``[head_dim / 2]``)."""
    d = model.head_dim
    inv_freq = 1.0 / model.rope_theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float64) / d)
    angle = position * inv_freq
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Grouped-query attention as a PyTorch model calls it."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same attention by plain matmuls in ``q``'s type (the float32 reference): query head
    ``i`` reads key/value head ``i // (heads / kv_heads)``, without copying the cache per head."""
    batch, heads, length, d = q.shape
    kv_heads = k.shape[1]
    grouped = q.reshape(batch, kv_heads, heads // kv_heads * length, d)
    scores = grouped @ k.transpose(-1, -2) / math.sqrt(d)
    return (scores.softmax(-1) @ v).reshape(batch, heads, length, d)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class Step:
    """``layers`` applications of one layer's shard to a batch (one decode step of a model whose
    layers all have these weights). ``reduce(t)`` sums ``t`` over the tensor-parallel ranks in
    place (``None``: one rank, nothing to sum). The row-parallel projections write into
    ``buffer`` (``[batch, hidden]`` or larger, flat), so that a backend can keep it in a window;
    every backend runs the same kernels around its AllReduce. ``attend`` computes the attention
    (default ``sdpa``)."""

    def __init__(self, model: Llama, w: Weights, cache: Cache, layers: int, buffer: torch.Tensor, reduce=None,
                 attend=sdpa):
        self.model, self.w, self.cache, self.layers = model, w, cache, layers
        self.reduce, self.attend = reduce or (lambda t: t), attend
        batch = cache.k.shape[0]
        self.out = buffer[: batch * model.hidden].view(batch, model.hidden)
        self.rope = rope(model, cache.k.shape[2] - 1, cache.k.device, w.qkv.dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.layers):
            x = self.layer(x)
        return x

    def layer(self, x: torch.Tensor) -> torch.Tensor:
        eps, w = self.model.rms_eps, self.w
        h = x + self.row_parallel(self.attention(rms_norm(x, w.attn_norm, eps)), w.o)
        gate, up = F.linear(rms_norm(h, w.mlp_norm, eps), w.gate_up).chunk(2, dim=-1)
        return h + self.row_parallel(F.silu(gate) * up, w.down)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        w, cache, batch = self.w, self.cache, x.shape[0]
        d = w.head_dim
        q, k, v = F.linear(x, w.qkv).split([w.heads * d, w.kv_heads * d, w.kv_heads * d], dim=-1)
        q = rotate(q.view(batch, w.heads, 1, d), *self.rope)
        k = rotate(k.view(batch, w.kv_heads, 1, d), *self.rope)
        last = cache.k.shape[2] - 1
        cache.k[:, :, last:] = k
        cache.v[:, :, last:] = v.view(batch, w.kv_heads, 1, d)
        return self.attend(q, cache.k, cache.v).reshape(batch, w.heads * d)

    def row_parallel(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """This rank's partial product into the buffer, summed over the ranks."""
        torch.mm(x, weight.t(), out=self.out)
        return self.reduce(self.out)


def reference(model: Llama, whole: Weights, x: torch.Tensor, cache: Cache, layers: int):
    """The unsharded step on this GPU, each on its own copy of ``cache``: ``(float32 result by
    plain matmuls, BF16 result as the shards compute it)``."""
    results = []
    for dtype, attend in ((torch.float32, grouped_attention), (torch.bfloat16, sdpa)):
        copy = Cache(cache.k.to(dtype, copy=True), cache.v.to(dtype, copy=True))
        buffer = torch.empty(x.shape[0] * model.hidden, dtype=dtype, device=x.device)
        results.append(Step(model, whole.to(dtype), copy, layers, buffer, attend=attend)(x.to(dtype)))
        del copy, buffer
    return results[0], results[1]
