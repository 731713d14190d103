"""The arguments of ``python -m e2e.tp_decode`` and ``python -m e2e.ep_moe``, with the checks
that need the rank count. No torch."""

from __future__ import annotations

import argparse

from weft._bench import non_negative_int, positive_int

from .shapes import DEEPSEEK_V3, EP_DECODE_TOKENS, EP_PREFILL_TOKENS, LLAMA

# torch.distributed over the process's libnccl.so.2: the real NCCL, or weft's when preloaded.
TP_BACKENDS = {
    "nccl": "torch.distributed, the real NCCL",
    "weft-nccl": "torch.distributed through weft's libnccl.so.2 (LD_PRELOAD)",
    "weft-python": "weft.Communicator, the AllReduce buffer in a window",
    "weft-python-nowin": "weft.Communicator, no window",
}
EP_VARIANTS = {
    "weft-normal": "weft.ep normal mode (dispatch, combine; BF16)",
    "weft-ll": "weft.ep low-latency mode (BF16; decode only)",
    "all-to-all": "torch.distributed.all_to_all_single over NCCL",
}
EP_PHASES = {"prefill": EP_PREFILL_TOKENS, "decode": EP_DECODE_TOKENS}


def int_list(text: str) -> list[int]:
    """Comma-separated positive integers, sorted, each once."""
    return sorted({positive_int(part) for part in text.split(",")})


def choices(names: dict[str, str]):
    """A parser of comma-separated names out of ``names``, in the order given, each once."""

    def parse(text: str) -> list[str]:
        picked = []
        for part in text.split(","):
            if part not in names:
                raise argparse.ArgumentTypeError(f"{part!r} is not one of {', '.join(names)}")
            if part not in picked:
                picked.append(part)
        return picked

    return parse


def _common(p: argparse.ArgumentParser, warmup: int, iters: int) -> None:
    p.add_argument("--warmup", type=non_negative_int, default=warmup, help="untimed runs before timing")
    p.add_argument("--iters", type=positive_int, default=iters, help="timed runs (the median is reported)")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the single-GPU reference")
    p.add_argument("--seed", type=int, default=2024, help="seed of every weight and input")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the rows here")


def tp_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m e2e.tp_decode", description="Tensor-parallel decode step of Llama 3.1 layers."
    )
    p.add_argument("--backends", type=choices(TP_BACKENDS), default=["nccl", "weft-python"],
                   help=f"comma-separated, of: {', '.join(TP_BACKENDS)}")
    p.add_argument("--models", type=choices(LLAMA), default=["70b"], help=f"comma-separated, of: {', '.join(LLAMA)}")
    p.add_argument("--batches", type=int_list, default=[1, 8, 32, 128], help="tokens per step (one per sequence)")
    p.add_argument("--layers", type=non_negative_int, default=0,
                   help="layers per step, one block's weights applied this many times (0: the model's depth)")
    p.add_argument("--context", type=positive_int, default=1024, help="positions each sequence attends to")
    _common(p, warmup=2, iters=10)
    return p


def _parse(p: argparse.ArgumentParser, argv, refusals) -> argparse.Namespace:
    """``argv`` parsed by ``p``; exits with ``p``'s usage and the first reason ``refusals(args)``
    yields, if any."""
    args = p.parse_args(argv)
    for reason in refusals(args):
        p.error(reason)
    return args


def tp_args(argv=None, ranks: int = 1) -> argparse.Namespace:
    """The arguments of ``e2e.tp_decode`` for ``ranks`` tensor-parallel ranks."""

    def refusals(args):
        for key in args.models:
            try:
                LLAMA[key].shard(ranks)
            except ValueError as e:
                yield str(e)
        if "nccl" in args.backends and "weft-nccl" in args.backends:
            yield "--backends: nccl and weft-nccl need separate launches (weft's libnccl.so.2 is preloaded or not)"

    return _parse(tp_parser(), argv, refusals)


def ep_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m e2e.ep_moe", description="Expert-parallel MoE layer of DeepSeek-V3."
    )
    p.add_argument("--variants", type=choices(EP_VARIANTS), default=list(EP_VARIANTS),
                   help=f"comma-separated, of: {', '.join(EP_VARIANTS)}")
    p.add_argument("--phases", type=choices(EP_PHASES), default=list(EP_PHASES), help="prefill, decode")
    p.add_argument("--prefill-tokens", type=positive_int, default=EP_PREFILL_TOKENS, help="tokens per rank")
    p.add_argument("--decode-tokens", type=positive_int, default=EP_DECODE_TOKENS, help="tokens per rank")
    p.add_argument("--num-sms", type=positive_int, default=24, help="SMs of weft.ep's kernels (even)")
    _common(p, warmup=3, iters=10)
    return p


def ep_args(argv=None, ranks: int = 1) -> argparse.Namespace:
    """The arguments of ``e2e.ep_moe`` for ``ranks`` expert-parallel ranks."""

    def refusals(args):
        try:
            DEEPSEEK_V3.local_experts(ranks)
        except ValueError as e:
            yield str(e)
        if args.num_sms % 2:
            yield f"--num-sms: must be even (a channel is 2 SMs), got {args.num_sms}"

    return _parse(ep_parser(), argv, refusals)


def phase_tokens(args: argparse.Namespace, phase: str) -> int:
    return args.prefill_tokens if phase == "prefill" else args.decode_tokens
