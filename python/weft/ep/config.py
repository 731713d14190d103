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

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """The NVLink buffer bytes weft's normal-mode kernels need with this config."""
        _positive(hidden_bytes=hidden_bytes, num_ranks=num_ranks)
        return _native.nvl_buffer_size_hint(self, hidden_bytes, num_ranks)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """The RDMA buffer bytes weft's normal-mode kernels need with this config (0 within a
        node)."""
        _positive(hidden_bytes=hidden_bytes, num_ranks=num_ranks)
        return _native.rdma_buffer_size_hint(self, hidden_bytes, num_ranks)


def _positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")
