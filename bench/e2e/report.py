"""``python -m e2e.report --out DIR RESULT.json...``: the rows of every launch (``tp_decode``
through each backend, ``ep_moe``) merged into the measured section of docs/perf/e2e.md
(``DIR/e2e-results.md``) and its plot (``DIR/e2e.svg``, when matplotlib is importable;
the section says so when it is not). Every row states its ratio to the baseline (NCCL, or the
all-to-all) and whether it meets the issue's target. No torch."""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from dataclasses import dataclass

from .results import EpRow, TpRow, read
from .shapes import LLAMA

TP_BASELINE, EP_BASELINE = "nccl", "all-to-all"
TP_ORDER = ("nccl", "weft-nccl", "weft-python", "weft-python-nowin")
TP_LABELS = {
    "nccl": "NCCL", "weft-nccl": "weft libnccl", "weft-python": "weft Python",
    "weft-python-nowin": "weft Python, no window",
}
EP_ORDER = ("all-to-all", "weft-normal", "weft-ll")
EP_LABELS = {
    "all-to-all": "all_to_all_single (NCCL)", "weft-normal": "weft.ep normal", "weft-ll": "weft.ep low latency",
}


@dataclass(frozen=True)
class Target:
    """A speedup the issue asks for over the baseline, on the rows it names."""

    text: str
    speedup: float

    def applies(self, row) -> bool:
        if isinstance(row, TpRow):
            return row.model == "70b" and row.batch <= 32
        return row.phase == "decode"


TP_TARGET = Target("70B, batch 1–32: ≥ 1.3× NCCL", 1.3)
EP_TARGET = Target("decode: ≥ 1.5× the all-to-all", 1.5)


@dataclass(frozen=True)
class Published:
    """A DeepEP number from outside this run (other machines; BF16 unless ``payload`` says)."""

    source: str
    ranks: int
    tokens: int
    mode: str  # the weft.ep variant it compares with
    dispatch_us: float
    combine_us: float
    payload: str


DEEPEP = (
    Published("DeepEP 567632d, its tests/test_intranode.py on a 4×H200 machine, 24 SMs", 4, 4096, "weft-normal",
              810, 598, "BF16 dispatch, BF16 combine"),
    Published("UCCL-EP README (DeepEP kernels), 8×H200, 24 SMs", 8, 4096, "weft-normal", 500, 973,
              "FP8 dispatch, BF16 combine"),
    Published("DeepEP V1 README, low latency, 8×H800 (EP8)", 8, 128, "weft-ll", 77, 114, "FP8 dispatch, BF16 combine"),
)


@dataclass
class Merged:
    tp: list[TpRow]
    ep: list[EpRow]
    metas: list[tuple[str, dict]]  # (file, meta) of every launch


def merge(paths: list[str]) -> Merged:
    merged = Merged([], [], [])
    for path in paths:
        kind, meta, rows = read(path)
        (merged.tp if kind == "tp-decode" else merged.ep).extend(rows)
        merged.metas.append((path, meta))
    return merged


def ratio(base: float | None, value: float) -> float | None:
    return base / value if base and value > 0 else None


def fmt_ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def verdict(target: Target, r: float | None) -> str:
    if r is None:
        return "no baseline"
    return "met" if r >= target.speedup else "missed"


def table(head: list[str], lines: list[list[str]]) -> str:
    rows = [head, ["---"] * len(head), *lines]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def human_bytes(n: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def tp_section(rows: list[TpRow]) -> str:
    backends = [b for b in TP_ORDER if any(r.backend == b for r in rows)]
    groups: dict[tuple, dict[str, TpRow]] = defaultdict(dict)
    for r in rows:
        groups[(r.model, r.tp, r.batch, r.layers, r.context)][r.backend] = r
    timing, checks = [], []
    for key in sorted(groups, key=lambda k: (list(LLAMA).index(k[0]), k[1], k[2], k[3], k[4])):
        model, tp, batch, layers, context = key
        by = groups[key]
        first = next(iter(by.values()))
        base = by.get(TP_BASELINE)
        line = [LLAMA[model].name, str(tp), str(batch), human_bytes(first.allreduce_bytes), str(layers),
                f"{first.compute_us:.0f}"]
        met = []
        for b in backends:
            r = by.get(b)
            if r is None:
                line += ["—"] if b == TP_BASELINE else ["—", "—"]
                continue
            line.append(f"{r.step_us:.0f} ({100 * r.comm_share:.0f}%)")
            if b != TP_BASELINE:
                q = ratio(base.step_us if base else None, r.step_us)
                line.append(fmt_ratio(q))
                if TP_TARGET.applies(r):
                    met.append(f"{TP_LABELS[b]}: {verdict(TP_TARGET, q)}")
        line.append("; ".join(met) or "—")
        timing.append(line)
        ref = next((r for r in by.values() if r.bf16_err is not None), None)
        check = [LLAMA[model].name, str(tp), str(batch), f"{ref.bf16_err:.2e}" if ref else "not checked"]
        for b in backends:
            check.append(tp_check(by.get(b), base))
        checks.append(check)
    head = ["model", "TP", "batch", "AllReduce", "layers", "compute µs"]
    for b in backends:
        head.append(f"{TP_LABELS[b]} µs (comm)")
        if b != TP_BASELINE:
            head.append("×NCCL")
    head.append(f"target ({TP_TARGET.text})")
    check_head = ["model", "TP", "batch", "BF16 one GPU max err"] + [TP_LABELS[b] for b in backends]
    return (
        "### Tensor-parallel decode step\n\n"
        "µs per step (one CUDA graph replay, the slowest rank's median); (comm) is the share of the step "
        "its AllReduces add to the same step without them (compute µs).\n\n"
        + table(head, timing)
        + "\n\nChecks: max |error| against the unsharded float32 step (× the unsharded BF16 step's error); "
        "`repeatable`: two replays bitwise equal on every rank; `ranks equal`: every rank's output bitwise "
        "rank 0's; `= NCCL`: bitwise NCCL's output of the same launch inputs.\n\n"
        + table(check_head, checks)
    )


def tp_check(r: TpRow | None, base: TpRow | None) -> str:
    if r is None:
        return "—"
    parts = []
    if r.max_abs_err is not None:
        times = f" ({r.max_abs_err / r.bf16_err:.2f}×)" if r.bf16_err else ""
        parts.append(f"{r.max_abs_err:.2e}{times} {'pass' if r.passed else 'FAIL'}")
    parts.append("repeatable" if r.deterministic is not False else "NOT repeatable")
    parts.append("ranks equal" if r.ranks_equal else "ranks DIFFER")
    if base is not None and r is not base:
        parts.append("= NCCL" if r.output_sha == base.output_sha else "≠ NCCL bits")
    if r.windows:
        parts.append("window")
    return ", ".join(parts)


def ep_section(rows: list[EpRow]) -> str:
    groups: dict[tuple, dict[str, EpRow]] = defaultdict(dict)
    for r in rows:
        groups[(r.phase, r.tokens, r.ranks)][r.variant] = r
    timing, checks = [], []
    for key in sorted(groups, key=lambda k: (k[0] != "prefill", k[1], k[2])):
        by = groups[key]
        base = by.get(EP_BASELINE)
        for v in EP_ORDER:
            r = by.get(v)
            if r is None:
                continue
            q = ratio(base.layer_us if base else None, r.layer_us)
            target = verdict(EP_TARGET, q) if EP_TARGET.applies(r) and v != EP_BASELINE else "—"
            timing.append([
                r.phase, str(r.tokens), str(r.ranks), EP_LABELS[v], f"{r.layer_us:.0f}",
                fmt_ratio(q) if v != EP_BASELINE else "1.00×", f"{r.dispatch_us:.0f}", f"{r.combine_us:.0f}",
                f"{r.compute_us:.0f}", f"{100 * r.overlap:.0f}%", target,
            ])
            err = "not checked"
            if r.max_abs_err is not None:
                times = f" ({r.max_abs_err / r.bf16_err:.2f}×)" if r.bf16_err else ""
                err = f"{r.max_abs_err:.2e}{times} {'pass' if r.passed else 'FAIL'}"
            checks.append([
                r.phase, EP_LABELS[v], f"{r.bf16_err:.2e}" if r.bf16_err is not None else "—", err,
                "repeatable" if r.deterministic is not False else "NOT repeatable", r.grouped_mm,
            ])
    head = ["phase", "tokens/rank", "ranks", "variant", "layer µs", "×all-to-all", "dispatch µs", "combine µs",
            "compute µs", "overlap", f"target ({EP_TARGET.text})"]
    check_head = ["phase", "variant", "BF16 one GPU max err", "max err (× BF16)", "repeatable", "expert GEMMs"]
    return (
        "### Expert-parallel MoE layer (DeepSeek-V3)\n\n"
        "µs per layer (the slowest rank's median); dispatch, combine and compute (router, shared and routed "
        "experts) are each timed alone; overlap = (dispatch + combine + compute − layer) / (dispatch + combine).\n\n"
        + table(head, timing)
        + "\n\n"
        + table(check_head, checks)
        + "\n\n"
        + deepep_section(rows)
    )


def deepep_section(rows: list[EpRow]) -> str:
    lines = []
    for p in DEEPEP:
        here = next((r for r in rows if r.variant == p.mode and r.ranks == p.ranks and r.tokens == p.tokens), None)
        ours = f"{here.dispatch_us:.0f} / {here.combine_us:.0f} (BF16)" if here else f"no run at {p.ranks} ranks"
        lines.append([p.source, str(p.ranks), str(p.tokens), f"{p.dispatch_us:g} / {p.combine_us:g}", p.payload, ours])
    head = ["DeepEP, published or measured elsewhere", "ranks", "tokens/rank", "dispatch / combine µs", "payload",
            "weft.ep in this run, dispatch / combine µs"]
    intro = "DeepEP's numbers at this model's shape (other machines; compared only where ranks and tokens match):"
    return intro + "\n\n" + table(head, lines)


def machines(metas: list[tuple[str, dict]]) -> str:
    lines = []
    for path, m in metas:
        lib = ", ".join(m.get("libnccl", [])) or "none mapped"
        lines.append(
            f"- `{path.rsplit('/', 1)[-1]}`: {m.get('ranks', '?')} × {m.get('device', '?')} "
            f"({m.get('sms', '?')} SMs), torch {m.get('torch', '?')}, CUDA {m.get('cuda', '?')}, libnccl: {lib}"
        )
    return "\n".join(lines)


def plot(merged: Merged, path: str) -> str | None:
    """Writes the plot; returns why it did not (``None`` when it did)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"matplotlib is not importable here ({e})"
    panels = sorted({(r.model, r.tp) for r in merged.tp}, key=lambda k: (list(LLAMA).index(k[0]), k[1]))
    phases = sorted({r.phase for r in merged.ep}, key=lambda p: p != "prefill")
    count = len(panels) + len(phases)
    if count == 0:
        return "no rows to plot"
    fig, axes = plt.subplots(1, count, figsize=(5 * count, 4), squeeze=False)
    for ax, (model, tp) in zip(axes[0], panels):
        for b in TP_ORDER:
            pts = sorted((r.batch, r.step_us / 1e3) for r in merged.tp if (r.model, r.tp, r.backend) == (model, tp, b))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=TP_LABELS[b])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (tokens per step)")
        ax.set_ylabel("ms per decode step")
        ax.set_title(f"{LLAMA[model].name}, TP {tp}")
        ax.legend()
    for ax, phase in zip(axes[0][len(panels):], phases):
        rs = [r for v in EP_ORDER for r in merged.ep if r.phase == phase and r.variant == v]
        ax.bar([EP_LABELS[r.variant] for r in rs], [r.layer_us for r in rs])
        ax.set_ylabel("µs per MoE layer")
        ax.set_title(f"DeepSeek-V3 MoE, {phase} ({rs[0].tokens if rs else '?'} tokens/rank)")
        ax.tick_params(axis="x", labelrotation=15)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def render(merged: Merged, plot_note: str | None, plot_name: str) -> str:
    parts = ["## Measured\n", machines(merged.metas), ""]
    if merged.tp:
        parts += [tp_section(merged.tp), ""]
    if merged.ep:
        parts += [ep_section(merged.ep), ""]
    parts.append(f"![end-to-end latency]({plot_name})" if plot_note is None else f"No plot: {plot_note}.")
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.report", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for e2e-results.md and e2e.svg")
    p.add_argument("--link", default="data/e2e/e2e.svg", help="the plot's path as docs/perf/e2e.md links it")
    p.add_argument("results", nargs="+", help="JSON of tp_decode and ep_moe launches")
    args = p.parse_args(argv)
    merged = merge(args.results)
    note = plot(merged, os.path.join(args.out, "e2e.svg"))
    text = render(merged, note, args.link)
    with open(os.path.join(args.out, "e2e-results.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
