"""What the end-to-end benchmarks measure and write: the timing statistics, one row per
measured configuration, the error check, and the JSON document a run leaves for the report.
No torch."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from weft._bench import Stats, summarize

# A backend's output passes when its largest error against the float32 reference is at most
# this many times the error of the same layer run unsharded in BF16 on one GPU (the error BF16
# arithmetic itself makes), or at most FLOOR of the reference's largest magnitude.
TOLERANCE_FACTOR = 2.0
TOLERANCE_FLOOR = 2.0**-8


def slowest(per_rank: list[Stats]) -> Stats:
    """The statistics of the rank whose median is largest (a step ends when every rank is done)."""
    if not per_rank:
        raise ValueError("per_rank: no ranks")
    return max(per_rank, key=lambda s: s.median_us)


@dataclass
class Check:
    """A backend's output against the float32 reference of the unsharded layer."""

    max_abs_err: float
    ref_max: float  # largest magnitude of the reference
    bf16_err: float  # the unsharded BF16 layer's largest error against the same reference
    deterministic: bool  # bitwise equal over two runs of the same inputs

    @property
    def tolerance(self) -> float:
        return max(TOLERANCE_FACTOR * self.bf16_err, TOLERANCE_FLOOR * self.ref_max)

    @property
    def passed(self) -> bool:
        return self.max_abs_err <= self.tolerance and self.deterministic


@dataclass(kw_only=True)
class Checked:
    """A row's check against ``Check``: its fields, ``None`` where the run skipped the check
    (``with_check`` fills them in)."""

    max_abs_err: float | None = None
    ref_max: float | None = None
    bf16_err: float | None = None
    deterministic: bool | None = None
    passed: bool | None = None

    def verdict(self, *facts: str) -> str:
        """The end of the row's printed line: the errors, whether it repeated, ``facts``, and
        ``ok`` or ``FAIL`` (empty when unchecked)."""
        if self.passed is None:
            return ""
        said = ", ".join([f"repeatable {self.deterministic}", *facts])
        return (
            f"; max |err| {self.max_abs_err:.3e} (BF16 on one GPU {self.bf16_err:.3e}, |ref| {self.ref_max:.2f}), "
            f"{said}: {'ok' if self.passed else 'FAIL'}"
        )


@dataclass
class TpRow(Checked):
    """One decode step configuration through one backend (the slowest rank's times)."""

    model: str  # key of shapes.LLAMA
    tp: int
    batch: int
    layers: int
    context: int
    backend: str
    step_us: float  # median per step
    step_min_us: float
    step_max_us: float
    compute_us: float  # the same step without its AllReduces (same launch)
    allreduce_bytes: int
    windows: bool  # the AllReduce buffer lies in a weft window
    output_sha: str  # SHA-256 of rank 0's output bytes
    ranks_equal: bool  # every rank's output is rank 0's, bit for bit

    @property
    def comm_share(self) -> float:
        """The part of the step the AllReduces add to its compute."""
        return max(0.0, 1.0 - self.compute_us / self.step_us) if self.step_us > 0 else 0.0

    def summary(self) -> str:
        """The row's printed line."""
        return (
            f"{self.model} tp{self.tp} batch {self.batch:>3} {self.backend:>17}: {self.step_us:9.1f} µs per step "
            f"({self.layers} layers; compute {self.compute_us:.1f} µs, communication {100 * self.comm_share:.0f}%)"
        ) + self.verdict(f"ranks equal {self.ranks_equal}")


@dataclass
class EpRow(Checked):
    """One MoE layer configuration through one variant (the slowest rank's times)."""

    phase: str  # prefill or decode
    tokens: int  # per rank
    ranks: int
    variant: str
    layer_us: float  # median of the whole layer (communication overlapped where the variant can)
    layer_min_us: float
    layer_max_us: float
    dispatch_us: float  # the dispatch alone
    combine_us: float  # the combine alone
    compute_us: float  # router, shared expert and routed experts without communication
    num_sms: int
    grouped_mm: str  # how the routed experts' GEMMs ran

    @property
    def comm_us(self) -> float:
        return self.dispatch_us + self.combine_us

    @property
    def overlap(self) -> float:
        """The share of the communication hidden behind compute: (communication + compute -
        layer) / communication. Zero when the layer is their sum; negative when the layer
        costs more than both alone (synchronisation and launch gaps)."""
        return (self.comm_us + self.compute_us - self.layer_us) / self.comm_us if self.comm_us > 0 else 0.0

    def summary(self) -> str:
        """The row's printed line."""
        return (
            f"{self.phase} {self.tokens} tokens/rank {self.variant:>11}: layer {self.layer_us:9.1f} µs "
            f"(dispatch {self.dispatch_us:.1f}, combine {self.combine_us:.1f}, compute {self.compute_us:.1f} µs; "
            f"{100 * self.overlap:.0f}% of the communication overlapped)"
        ) + self.verdict()


def with_check(row, check: Check | None):
    """``row`` with ``check``'s fields filled in (unchanged when there was no check)."""
    if check is not None:
        row.max_abs_err, row.ref_max, row.bf16_err = check.max_abs_err, check.ref_max, check.bf16_err
        row.deterministic, row.passed = check.deterministic, check.passed
    return row


ROW_TYPES = {"tp-decode": TpRow, "ep-moe": EpRow}


def document(kind: str, meta: dict, rows: list) -> dict:
    """The JSON document of one launch: its ``kind`` (a key of ``ROW_TYPES``), where and how it
    ran (``meta``: devices, versions, settings) and its rows."""
    if kind not in ROW_TYPES:
        raise ValueError(f"kind: one of {', '.join(ROW_TYPES)}, got {kind!r}")
    return {"kind": kind, "meta": meta, "rows": [asdict(r) for r in rows]}


def write(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def read(path: str) -> tuple[str, dict, list]:
    """``(kind, meta, rows)`` of a document ``write`` wrote; rows as their dataclass."""
    with open(path) as f:
        doc = json.load(f)
    kind = doc.get("kind")
    if kind not in ROW_TYPES:
        raise ValueError(f"{path}: not an end-to-end result (kind {kind!r})")
    row_type = ROW_TYPES[kind]
    names = {f.name for f in fields(row_type)}
    rows = [row_type(**{k: v for k, v in r.items() if k in names}) for r in doc["rows"]]
    return kind, doc.get("meta", {}), rows
