"""What the GPU halves of the end-to-end benchmarks share: the process group under torchrun,
seeded weights, CUDA-event timing, the slowest rank's statistics, errors and digests."""

from __future__ import annotations

import hashlib
import os
import platform

import torch
import torch.distributed as dist
from weft import _bench

from .results import Stats, slowest, summarize

# A gloo group over the same ranks: the harness's own exchanges (statistics, digests, flags)
# and barriers wait on the host, never in a kernel of the backend under test (weft bounds its
# device waits, so a rank busy with the reference must not leave its peers waiting in one).
_host_group = None


def init() -> tuple[int, int, torch.device]:
    """Binds this process to GPU ``LOCAL_RANK`` and joins torchrun's job over NCCL (the real
    one, or weft's ``libnccl.so.2`` when preloaded). Returns ``(rank, ranks, device)``."""
    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    if os.environ.get("LOCAL_WORLD_SIZE") == str(ranks):
        # Every rank on this host: gloo over loopback, whatever the host name resolves to.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    global _host_group
    _host_group = dist.new_group(backend="gloo")
    # The float32 reference is float32: no TF32 in its matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return rank, ranks, device


def meta(ranks: int, device: torch.device, args) -> dict:
    """Where and how the run happened, for the report."""
    props = torch.cuda.get_device_properties(device)
    return {
        "device": props.name,
        "sms": props.multi_processor_count,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "ranks": ranks,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "libnccl": loaded_libraries("libnccl"),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
    }


def loaded_libraries(prefix: str) -> list[str]:
    """Paths of the shared libraries whose file name starts with ``prefix`` that this process
    has mapped (which libnccl.so.2 torch.distributed really calls)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith(prefix))


def host_barrier() -> None:
    """Every rank's host reaches this point (nothing waits on a GPU)."""
    dist.barrier(group=_host_group)


def host_gather(value) -> list:
    """Every rank's ``value`` (a picklable object), exchanged on the host."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value, group=_host_group)
    return everyone


def randn(shape, seed: int, device: torch.device, scale: float = 1.0, dtype=torch.bfloat16) -> torch.Tensor:
    """Normal values times ``scale`` from ``seed`` alone, generated on ``device`` (every rank
    draws the same values: the GPUs of one machine are one model, and the generator's output
    depends on the seed, the shape and the GPU model only)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return values.mul_(scale).to(dtype)


def time_calls(call, warmup: int, iters: int) -> list[float]:
    """Microseconds of each of ``iters`` runs of ``call`` after ``warmup``, each between two
    events on the current stream, the ranks started together."""
    host_barrier()

    def settle():
        torch.cuda.synchronize()
        host_barrier()

    return _bench.time_calls(call, warmup, iters, settle)


def slowest_stats(samples_us: list[float]) -> Stats:
    """The statistics of the rank with the largest median (every rank calls it)."""
    return slowest(host_gather(summarize(samples_us)))


def every_rank(flag: bool) -> bool:
    """Whether ``flag`` holds on every rank (every rank calls it)."""
    return all(host_gather(bool(flag)))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max())


def digest(t: torch.Tensor) -> str:
    """SHA-256 of ``t``'s bytes (compares runs of separate launches bit for bit)."""
    data = t.detach().contiguous().view(torch.uint8).flatten().cpu()
    try:
        raw = data.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without numpy
        raw = bytes(data.tolist())
    return hashlib.sha256(raw).hexdigest()


def free() -> None:
    """Returns the cached blocks of freed tensors to the driver between configurations."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
