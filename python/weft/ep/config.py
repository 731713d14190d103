"""``Config``: the performance settings of a normal-mode dispatch or combine, as DeepEP's
(``num_sms`` and the NVLink/RDMA chunk sizes in tokens), checked as DeepEP checks them."""

from __future__ import annotations

from dataclasses import dataclass

from . import _native


@dataclass(frozen=True)
class Config:
    num_sms: int = 24
    num_max_nvl_chunked_send_tokens: int = 6
    num_max_nvl_chunked_recv_tokens: int = 256
    num_max_rdma_chunked_send_tokens: int = 6
    num_max_rdma_chunked_recv_tokens: int = 256

    def __post_init__(self):
        for field in self.__dataclass_fields__:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field}: must be a positive integer, got {value!r}")
        if self.num_sms % 2:
            raise ValueError(f"num_sms: must be even (a channel is 2 SMs), got {self.num_sms}")
        if self.num_max_nvl_chunked_send_tokens >= self.num_max_nvl_chunked_recv_tokens:
            raise ValueError(
                "num_max_nvl_chunked_send_tokens: must be below num_max_nvl_chunked_recv_tokens "
                f"({self.num_max_nvl_chunked_send_tokens} >= {self.num_max_nvl_chunked_recv_tokens})"
            )
        send, recv = self.num_max_rdma_chunked_send_tokens, self.num_max_rdma_chunked_recv_tokens
        # DeepEP rounds the RDMA receive chunk up to a multiple of the send chunk.
        object.__setattr__(self, "num_max_rdma_chunked_recv_tokens", -(-recv // send) * send)
        if send > self.num_max_rdma_chunked_recv_tokens // 2:
            raise ValueError(
                "num_max_rdma_chunked_send_tokens: must be at most half of num_max_rdma_chunked_recv_tokens "
                f"({send} > {self.num_max_rdma_chunked_recv_tokens} / 2)"
            )

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int, *, ranks_per_node: int | None = None) -> int:
        """The NVLink buffer bytes weft's normal-mode kernels need with this config: over one
        node, or where ``num_ranks`` span nodes of ``ranks_per_node`` ranks the hop within a
        node (see ``get_rdma_buffer_size_hint`` for ``ranks_per_node``)."""
        _positive(hidden_bytes=hidden_bytes, num_ranks=num_ranks)
        return _native.nvl_buffer_size_hint(self, hidden_bytes, num_ranks, _ranks_per_node(ranks_per_node))

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int, *, ranks_per_node: int | None = None) -> int:
        """The RDMA buffer bytes weft's normal-mode kernels need with this config: the hop
        between nodes where ``num_ranks`` span nodes of ``ranks_per_node`` ranks, 0 within a
        node. ``ranks_per_node=None`` decides as the communicator's topology will for virtual
        nodes (``WEFT_RANKS_PER_NODE``); hosts are known only once the ranks have met, so a
        group over several hosts passes their ranks per host."""
        _positive(hidden_bytes=hidden_bytes, num_ranks=num_ranks)
        return _native.rdma_buffer_size_hint(self, hidden_bytes, num_ranks, _ranks_per_node(ranks_per_node))


def _ranks_per_node(ranks_per_node: int | None) -> int | None:
    if ranks_per_node is None:
        return _native.env_ranks_per_node()
    _positive(ranks_per_node=ranks_per_node)
    return ranks_per_node


def _positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")
