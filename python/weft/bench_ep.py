"""``python -m weft.bench_ep``: weft.ep measured as DeepEP's tests/test_intranode.py and
tests/test_low_latency.py measure deep_ep, one process per GPU under torchrun:

    torchrun --nproc-per-node 2 -m weft.bench_ep --num-sms 24,32,64,128 --json ep.json

Normal mode: BF16 and FP8 dispatch with a cached handle, and combine, at each SM count; low
latency: FP8 dispatch and BF16 combine of ``--ll-tokens`` tokens per rank. Before timing, one
call of each operation is checked element by element (bit for bit) against a PyTorch reference
of the routing (``weft.ep.reference``). Each call is timed alone with CUDA events on the current
stream, after warm-up calls; the median and the min–max over the timed calls are reported, with
GB/s counted as DeepEP counts them. Rank 0 prints the table; ``--json`` writes every rank's rows.

Only ``main`` needs torch and GPUs; the rest (arguments, byte counts, statistics, rows) is plain
Python.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass

from ._bench import Stats, non_negative_int, positive_int, summarize

# DeepEP's FP8 bytes relative to BF16: one byte per channel and a float32 scale per 128.
FP8_FACTOR = (1 + 4 / 128) / 2


def sm_counts(text: str) -> list[int]:
    """``--num-sms``: comma-separated even positive SM counts."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    bad = [n for n in counts if n <= 0 or n % 2]
    if bad:
        raise argparse.ArgumentTypeError(f"SM counts must be even and positive (a channel is 2 SMs), got {bad}")
    return counts


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m weft.bench_ep", description=__doc__.split("\n\n")[0])
    p.add_argument("--num-tokens", type=positive_int, default=4096, help="tokens per rank (normal mode)")
    p.add_argument("--hidden", type=positive_int, default=7168, help="channels per token")
    p.add_argument("--num-topk", type=positive_int, default=8, help="experts per token")
    p.add_argument("--num-experts", type=positive_int, default=256, help="experts of the group")
    p.add_argument("--num-sms", type=sm_counts, default=[24, 32, 64, 128], help="SM counts to sweep (e.g. 24,32)")
    p.add_argument("--ll-tokens", type=non_negative_int, default=128, help="tokens per rank, low latency (0: skip)")
    p.add_argument("--warmup", type=non_negative_int, default=5, help="untimed calls before timing")
    p.add_argument("--iters", type=positive_int, default=30, help="timed calls")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the correctness check")
    p.add_argument("--json", metavar="FILE", help="write every rank's rows to FILE")
    return p


def parse_args(argv=None, num_ranks: int = 1) -> argparse.Namespace:
    """The arguments, with the checks that need the rank count (experts split evenly, FP8
    blocks of 128 channels)."""
    p = parser()
    args = p.parse_args(argv)
    if args.num_experts % num_ranks:
        p.error(f"--num-experts {args.num_experts} must be divisible by the {num_ranks} ranks")
    if args.hidden % 128:
        p.error(f"--hidden {args.hidden} must be a multiple of 128 (FP8 scales cover 128 channels)")
    if args.num_topk > args.num_experts:
        p.error(f"--num-topk {args.num_topk} exceeds --num-experts {args.num_experts}")
    return args


def dispatch_bytes(recv_rows: int, hidden: int, fp8: bool) -> float:
    """DeepEP's NVLink bytes of a dispatch: received rows (a rank's own included) × 2H, times
    (1 + 4/128) / 2 for FP8."""
    bf16 = recv_rows * hidden * 2
    return bf16 * FP8_FACTOR if fp8 else float(bf16)


def combine_bytes(recv_rows: int, hidden: int) -> float:
    """DeepEP's bytes of a combine: the BF16 rows the dispatch received, sent back."""
    return float(recv_rows * hidden * 2)


def ll_dispatch_bytes(selections: int, hidden: int, fp8: bool) -> float:
    """DeepEP's low-latency dispatch bytes: per selected (token, expert) pair, H + H/128 × 4 + 16
    for FP8 (values, scales, metadata), 2H for BF16."""
    return float(selections * ((hidden + hidden // 128 * 4 + 16) if fp8 else hidden * 2))


def ll_combine_bytes(selections: int, hidden: int) -> float:
    """DeepEP's low-latency combine bytes: 2H per selected pair."""
    return float(selections * hidden * 2)


@dataclass
class Row:
    """One measured operation of one rank."""

    rank: int
    op: str  # dispatch, combine, ll-dispatch, ll-combine
    payload: str  # fp8 or bf16
    num_sms: int
    recv_rows: int  # rows received (low latency: the rank's selected pairs)
    bytes: float
    median_us: float
    min_us: float
    max_us: float
    gbps: float  # bytes over the median time
    checked: bool


def row(rank: int, op: str, payload: str, num_sms: int, recv_rows: int, nbytes: float, stats: Stats, checked: bool) -> Row:
    return Row(
        rank, op, payload, num_sms, recv_rows, nbytes, stats.median_us, stats.min_us, stats.max_us,
        nbytes / stats.median_us / 1e3, checked,
    )


def table(rows: list[Row]) -> str:
    head = f"{'rank':>4} {'op':>11} {'type':>5} {'SMs':>4} {'recv rows':>9} {'median µs':>10} {'min–max µs':>17} {'GB/s':>7}"
    lines = [head]
    for r in rows:
        span = f"{r.min_us:.1f}–{r.max_us:.1f}"
        lines.append(
            f"{r.rank:>4} {r.op:>11} {r.payload:>5} {r.num_sms:>4} {r.recv_rows:>9} {r.median_us:>10.1f} {span:>17} {r.gbps:>7.1f}"
        )
    return "\n".join(lines)


def document(args: argparse.Namespace, num_ranks: int, rows: list[Row]) -> dict:
    """The ``--json`` document: the settings and every row."""
    settings = {k: v for k, v in vars(args).items() if k != "json"}
    return {"num_ranks": num_ranks, "settings": settings, "rows": [asdict(r) for r in rows]}


def main(argv=None) -> int:
    from ._bench_ep_gpu import run

    num_ranks = int(os.environ.get("WORLD_SIZE", "1"))
    return run(parse_args(argv, num_ranks))


if __name__ == "__main__":
    sys.exit(main())
