"""What weft's benchmarks share: ``python -m weft.bench_ep`` and the repository's end-to-end
benchmarks (bench/e2e) parse the same argument types, summarise timings the same way and time
calls between CUDA events the same way. Plain Python; torch is imported only when
``time_calls`` runs."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass


def positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


@dataclass
class Stats:
    """Microseconds of the timed calls."""

    median_us: float
    min_us: float
    max_us: float
    samples: int


def summarize(samples_us: list[float]) -> Stats:
    if not samples_us:
        raise ValueError("samples_us: no timed calls")
    return Stats(statistics.median(samples_us), min(samples_us), max(samples_us), len(samples_us))


def time_calls(call, warmup: int, iters: int, settle) -> list[float]:
    """Microseconds of each of ``iters`` calls of ``call`` after ``warmup`` untimed ones, each
    between two events on the current stream. ``settle`` runs after the warm-up, once the
    events exist, right before the first timed call: where the caller lines its ranks up and
    drains the GPU."""
    import torch

    for _ in range(warmup):
        call()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    settle()
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in events]
