"""The EP entry points of ``weft._weft`` without a GPU: they exist (``weft.ep`` then reports its
kernels available), compute the size hints, and refuse anything that is not a native EP buffer
with a message that names the argument."""

import pytest

import weft._weft as native
import weft.ep as deep_ep

ENTRY_POINTS = (
    "ep_buffer_create", "ep_buffer_destroy", "ep_nvl_bytes_hint", "ep_low_latency_rdma_size_hint",
    "ep_low_latency_net_bytes_hint",
    "ep_get_dispatch_layout", "ep_notify_dispatch", "ep_dispatch", "ep_combine", "ep_low_latency_dispatch",
    "ep_low_latency_combine",
)


def test_entry_points_exist():
    for name in ENTRY_POINTS:
        assert callable(getattr(native, name)), name
    assert deep_ep.KERNELS_AVAILABLE


def test_size_hints():
    assert native.ep_low_latency_rdma_size_hint(128, 7168, 8, 256) == 2 * 256 * 128 * (14352 + 14336)
    # Every rank's tokens have a staging slot; the top-k is capped at weft-ep's 32.
    assert native.ep_nvl_bytes_hint(64, 1024, 8, 4) == 4 * native.ep_nvl_bytes_hint(16, 1024, 8, 4)
    assert native.ep_nvl_bytes_hint(64, 1024, 64, 4) == native.ep_nvl_bytes_hint(64, 1024, 32, 4)
    # Between nodes: the send regions double the area, plus two halves of u64 count rows in and
    # out per expert (3.76 GB at DeepEP's shape, under the proxy's 4 GiB of offsets).
    assert native.ep_low_latency_net_bytes_hint(128, 7168, 256) == 2 * 2 * 256 * 128 * (14352 + 14336) + 4 * 256 * 8
    assert native.ep_low_latency_net_bytes_hint(128, 7168, 288) < 1 << 32


def test_node_layout(monkeypatch):
    # What the communicator's topology splits hosts by, read as weft's configuration reads it.
    monkeypatch.delenv("WEFT_RANKS_PER_NODE", raising=False)
    assert native.env_ranks_per_node() is None
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "2")
    assert native.env_ranks_per_node() == 2
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "0")
    with pytest.raises(native.WeftError, match="WEFT_RANKS_PER_NODE"):
        native.env_ranks_per_node()
    for getter in ("node_count", "ranks_per_node"):
        assert hasattr(native.Communicator, getter), getter


HANDLE = (16, 32, 48, 64, 80, 96, 10, 12)
CALLS = {
    "ep_buffer_destroy": (),
    "ep_get_dispatch_layout": (16, (4, 2, 8), 32, 48, 64, 0),
    "ep_notify_dispatch": ((16, 32, 48), (4, 2, 8), 1, 24, 64, 80, 0),
    "ep_dispatch": (16, 0, 256, 32, 48, HANDLE, 64, 0, 80, 96, (4, 2, 8), 24, False, 0),
    "ep_combine": (16, 256, 0, 0, (0, 0), HANDLE, 32, 0, 4, 0),
    "ep_low_latency_dispatch": (16, 32, 48, 0, 64, 80, 96, 0, (4, 2, 8, 256, 8), True, False, 24, "both", 0),
    "ep_low_latency_combine": (16, 32, 48, 64, 80, 96, (4, 2, 8, 256, 8), 24, "both", 0),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_calls_refuse_what_is_not_an_ep_buffer(name):
    for handle in (None, object(), 0x1000):
        with pytest.raises(TypeError, match="(?s)not an instance of 'EpBuffer'.*'buffer'"):
            getattr(native, name)(handle, *CALLS[name])


def test_create_takes_a_native_communicator():
    with pytest.raises(TypeError, match="(?s)not an instance of 'Communicator'.*'comm'"):
        native.ep_buffer_create(object(), 1 << 20, 0)
