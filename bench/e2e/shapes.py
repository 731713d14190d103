"""The shapes the end-to-end benchmarks run, from the models' published configurations (the
``config.json`` of Llama 3.1 8B, 70B and 405B and of DeepSeek-V3), and how tensor and expert
parallelism split them. No torch."""

from __future__ import annotations

from dataclasses import dataclass

BF16_BYTES = 2


@dataclass(frozen=True)
class Llama:
    """One Llama 3.1 decoder layer: grouped-query attention and a SwiGLU MLP, each after an
    RMSNorm."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    head_dim: int = 128
    rms_eps: float = 1e-5
    rope_theta: float = 500000.0

    def layer_params(self) -> int:
        """Weights of one layer (projections and the two norms)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return attention + mlp + 2 * self.hidden

    def shard(self, tp: int) -> "LlamaShard":
        """Rank ``tp``'s share of a layer; raises ``ValueError`` when ``tp`` does not split the
        heads, the key/value heads and the MLP evenly."""
        if tp < 1:
            raise ValueError(f"tp: must be positive, got {tp}")
        for what, n in (("heads", self.heads), ("kv_heads", self.kv_heads), ("intermediate", self.intermediate)):
            if n % tp:
                raise ValueError(f"tp: {tp} ranks do not split the {n} {what} of {self.name}")
        return LlamaShard(self, tp)


@dataclass(frozen=True)
class LlamaShard:
    """What one of ``tp`` ranks holds of a layer: column-parallel QKV and gate/up projections
    (whole heads, a slice of the MLP), row-parallel output and down projections (each ends in
    one AllReduce of the ``[batch, hidden]`` activations)."""

    model: Llama
    tp: int

    @property
    def heads(self) -> int:
        return self.model.heads // self.tp

    @property
    def kv_heads(self) -> int:
        return self.model.kv_heads // self.tp

    @property
    def intermediate(self) -> int:
        return self.model.intermediate // self.tp

    @property
    def qkv_rows(self) -> int:
        """Output features of this rank's fused QKV projection."""
        return (self.heads + 2 * self.kv_heads) * self.model.head_dim

    @property
    def attention_width(self) -> int:
        """Input features of this rank's output projection."""
        return self.heads * self.model.head_dim

    def weight_bytes(self) -> int:
        """BF16 bytes of this rank's weights of one layer (norms replicated)."""
        h = self.model.hidden
        params = h * self.qkv_rows + self.attention_width * h + 3 * h * self.intermediate + 2 * h
        return params * BF16_BYTES

    def allreduce_bytes(self, batch: int) -> int:
        """Bytes of each of the layer's two AllReduces at ``batch`` tokens."""
        return batch * self.model.hidden * BF16_BYTES


LLAMA = {
    "8b": Llama("Llama 3.1 8B", hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336),
    "70b": Llama("Llama 3.1 70B", hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672),
    "405b": Llama("Llama 3.1 405B", hidden=16384, layers=126, heads=128, kv_heads=8, intermediate=53248),
}


@dataclass(frozen=True)
class MoE:
    """DeepSeek-V3's MoE layer: a sigmoid router with group-limited top-k (``groups`` groups of
    experts, the best ``topk_groups`` kept, normalised weights times ``routed_scaling``), routed
    SwiGLU experts and always-on shared experts."""

    name: str
    hidden: int
    experts: int
    topk: int
    expert_intermediate: int
    shared_experts: int
    groups: int
    topk_groups: int
    routed_scaling: float

    @property
    def shared_intermediate(self) -> int:
        return self.shared_experts * self.expert_intermediate

    def local_experts(self, ranks: int) -> int:
        """Experts per rank; raises ``ValueError`` unless ``ranks`` splits them evenly."""
        if ranks < 1 or self.experts % ranks:
            raise ValueError(f"ranks: {ranks} ranks do not split the {self.experts} experts of {self.name}")
        return self.experts // ranks

    def expert_bytes(self) -> int:
        """BF16 bytes of one routed expert's three projections."""
        return 3 * self.hidden * self.expert_intermediate * BF16_BYTES


DEEPSEEK_V3 = MoE(
    "DeepSeek-V3", hidden=7168, experts=256, topk=8, expert_intermediate=2048, shared_experts=1, groups=8,
    topk_groups=4, routed_scaling=2.5,
)

# Tokens per rank of the two EP phases the issue names.
EP_PREFILL_TOKENS = 4096
EP_DECODE_TOKENS = 128
