"""The end-to-end benchmarks' rows and report (bench/e2e), without torch or GPUs: the error check,
the derived shares, the JSON round trip, and the markdown merged from the launches of every
backend (ratios to the baseline on every row, the issue's targets, DeepEP's numbers)."""

import sys

import pytest

from e2e import report, results
from e2e.results import Check, EpRow, TpRow


def tp(backend, batch, step_us, compute_us=600.0, sha="same", **kw):
    row = TpRow(model=kw.pop("model", "70b"), tp=2, batch=batch, layers=80, context=1024, backend=backend,
                step_us=step_us, step_min_us=step_us - 1, step_max_us=step_us + 1, compute_us=compute_us,
                allreduce_bytes=batch * 8192 * 2, windows=backend == "weft-python", output_sha=sha, ranks_equal=True)
    return results.with_check(row, kw.pop("check", Check(0.02, 30.0, 0.015, True)))


def ep(variant, phase, layer_us, tokens=None, ranks=2, **kw):
    tokens = tokens or (4096 if phase == "prefill" else 128)
    row = EpRow(phase=phase, tokens=tokens, ranks=ranks, variant=variant, layer_us=layer_us,
                layer_min_us=layer_us, layer_max_us=layer_us, dispatch_us=kw.get("dispatch", 100.0),
                combine_us=kw.get("combine", 100.0), compute_us=kw.get("compute", 300.0), num_sms=24,
                grouped_mm="torch._grouped_mm")
    return results.with_check(row, Check(0.01, 4.0, 0.008, True))


def test_check_tolerance_is_twice_the_bf16_error_or_a_floor():
    assert Check(0.02, 3.0, 0.015, True).passed
    assert not Check(0.031, 3.0, 0.015, True).passed  # more than twice BF16's own error
    assert not Check(0.0, 3.0, 0.015, False).passed  # not repeatable
    # A BF16 error of zero (an exact layer) still leaves 2^-8 of the largest magnitude, about
    # one BF16 step there.
    assert Check(3.0 / 256, 3.0, 0.0, True).passed and not Check(3.0 / 250, 3.0, 0.0, True).passed
    assert Check(0.1, 30.0, 0.015, True).tolerance == 30.0 / 256


def test_shares():
    assert tp("nccl", 1, 1000.0, compute_us=600.0).comm_share == pytest.approx(0.4)
    assert tp("nccl", 1, 500.0, compute_us=600.0).comm_share == 0.0  # never negative
    row = ep("weft-ll", "decode", 350.0, dispatch=100.0, combine=100.0, compute=300.0)
    assert row.comm_us == 200.0 and row.overlap == pytest.approx((200 + 300 - 350) / 200)
    assert ep("all-to-all", "decode", 600.0, compute=300.0).overlap == pytest.approx(-0.5)


def test_printed_lines_end_with_the_check_s_verdict():
    checked = tp("nccl", 8, 1000.0)
    assert checked.summary().startswith("70b tp2 batch   8              nccl:    1000.0 µs per step (80 layers;")
    assert checked.summary().endswith(", |ref| 30.00), repeatable True, ranks equal True: ok")
    assert "max |err|" not in tp("nccl", 8, 1000.0, check=None).summary()
    failed = results.with_check(ep("weft-ll", "decode", 350.0), Check(1.0, 4.0, 0.008, True))
    assert failed.summary().endswith("(BF16 on one GPU 8.000e-03, |ref| 4.00), repeatable True: FAIL")


def test_summaries():
    s = results.summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median_us, s.min_us, s.max_us, s.samples) == (2.5, 1.0, 10.0, 4)
    assert results.slowest([s, results.summarize([5.0])]).median_us == 5.0
    with pytest.raises(ValueError):
        results.summarize([])


def test_json_round_trip(tmp_path):
    rows = [tp("nccl", 1, 1000.0), tp("weft-python", 1, 800.0, check=None)]
    path = tmp_path / "tp.json"
    results.write(str(path), results.document("tp-decode", {"device": "H100"}, rows))
    kind, meta, back = results.read(str(path))
    assert (kind, meta, back) == ("tp-decode", {"device": "H100"}, rows)
    assert back[1].passed is None and back[0].passed is True
    with pytest.raises(ValueError, match="kind: one of"):
        results.document("bench", {}, rows)
    (tmp_path / "other.json").write_text('{"kind": "something"}')
    with pytest.raises(ValueError, match="not an end-to-end result"):
        results.read(str(tmp_path / "other.json"))


@pytest.fixture
def launches(tmp_path):
    """The files of a 2-GPU run: tp_decode on NCCL with weft.Communicator, tp_decode through
    weft's libnccl.so.2, and ep_moe."""
    meta = {"device": "NVIDIA H100 80GB HBM3", "sms": 132, "ranks": 2, "torch": "2.11.0", "cuda": "13.0"}
    files = {
        "tp-nccl.json": ("tp-decode", dict(meta, libnccl=["/venv/nvidia/nccl/lib/libnccl.so.2"]), [
            tp("nccl", 1, 1300.0), tp("weft-python", 1, 900.0),
            tp("nccl", 128, 3000.0, compute_us=2500.0), tp("weft-python", 128, 2900.0, compute_us=2500.0),
        ]),
        "tp-weft-nccl.json": ("tp-decode", dict(meta, libnccl=["/repo/target/nccl/libnccl.so.2"]), [
            tp("weft-nccl", 1, 1100.0, sha="other"), tp("weft-nccl", 128, 2950.0, compute_us=2500.0),
        ]),
        "ep.json": ("ep-moe", meta, [
            ep("weft-normal", "prefill", 4000.0), ep("all-to-all", "prefill", 6000.0),
            ep("weft-normal", "decode", 500.0), ep("weft-ll", "decode", 300.0), ep("all-to-all", "decode", 600.0),
        ]),
    }
    paths = []
    for name, (kind, m, rows) in files.items():
        path = tmp_path / name
        results.write(str(path), results.document(kind, m, rows))
        paths.append(str(path))
    return paths


def test_report_merges_every_backend_into_one_row_per_configuration(launches):
    merged = report.merge(launches)
    assert len(merged.tp) == 6 and len(merged.ep) == 5 and len(merged.metas) == 3
    text = report.render(merged, "matplotlib is not importable here", "data/e2e/e2e.svg")
    lines = text.splitlines()
    batch1 = next(line for line in lines if line.startswith("| Llama 3.1 70B | 2 | 1 | 16 KB"))
    # NCCL 1300 µs (54% over the 600 µs of compute); weft libnccl 1100 µs = 1.18× (missed);
    # weft Python 900 µs = 1.44× (met).
    assert batch1 == (
        "| Llama 3.1 70B | 2 | 1 | 16 KB | 80 | 600 | 1300 (54%) | 1100 (45%) | 1.18× | 900 (33%) | 1.44× | "
        "weft libnccl: missed; weft Python: met |"
    )
    batch128 = next(line for line in lines if line.startswith("| Llama 3.1 70B | 2 | 128 |"))
    assert batch128.endswith("| 2900 (14%) | 1.03× | — |")  # outside the target's batches
    assert "No plot: matplotlib is not importable here." in text
    assert "/repo/target/nccl/libnccl.so.2" in text and "2 × NVIDIA H100 80GB HBM3" in text


def test_report_checks_columns(launches):
    text = report.render(report.merge(launches), None, "data/e2e/e2e.svg")
    check = next(line for line in text.splitlines() if line.startswith("| Llama 3.1 70B | 2 | 1 | 1.50e-02"))
    assert "2.00e-02 (1.33×) pass, repeatable, ranks equal |" in check
    assert "≠ NCCL bits" in check  # weft libnccl's digest differs from NCCL's in this fixture
    assert "= NCCL, window" in check  # weft Python's matches, its buffer in a window
    assert "![end-to-end latency](data/e2e/e2e.svg)" in text


def test_report_ep_rows_and_targets(launches):
    lines = report.render(report.merge(launches), "none", "x.svg").splitlines()
    rows = [line for line in lines if line.startswith("| prefill |") or line.startswith("| decode |")]
    # Prefill first, the baseline first in each phase; every row has its ratio to the baseline.
    assert [r.split(" | ")[3] for r in rows[:5]] == [
        "all_to_all_single (NCCL)", "weft.ep normal", "all_to_all_single (NCCL)", "weft.ep normal",
        "weft.ep low latency",
    ]
    assert rows[1].split(" | ")[4:6] == ["4000", "1.50×"] and rows[1].endswith("| — |")  # no target in prefill
    assert rows[3].split(" | ")[5] == "1.20×" and rows[3].endswith("| missed |")
    assert rows[4].split(" | ")[5] == "2.00×" and rows[4].endswith("| met |")
    assert rows[4].split(" | ")[9] == "100%"  # overlap: (100 + 100 + 300 - 300) / (100 + 100)
    deepep = [line for line in lines if line.startswith(("| DeepEP 5", "| DeepEP V1", "| UCCL"))]
    assert len(deepep) == 3 and all("no run at" in line for line in deepep)


def test_report_without_a_baseline(tmp_path):
    path = tmp_path / "tp.json"
    results.write(str(path), results.document("tp-decode", {}, [tp("weft-nccl", 8, 1000.0)]))
    text = report.render(report.merge([str(path)]), "none", "x.svg")
    row = next(line for line in text.splitlines() if line.startswith("| Llama 3.1 70B | 2 | 8 |"))
    # Only the backends that ran have columns; with no NCCL row there is no ratio.
    assert row.endswith("| 80 | 600 | 1000 (40%) | — | weft libnccl: no baseline |")


def test_deepep_numbers_compare_where_ranks_and_tokens_match(tmp_path):
    path = tmp_path / "ep.json"
    rows = [ep("weft-normal", "prefill", 900.0, ranks=4, dispatch=700.0, combine=500.0)]
    results.write(str(path), results.document("ep-moe", {}, rows))
    text = report.render(report.merge([str(path)]), "none", "x.svg")
    line = next(line for line in text.splitlines() if "4×H200 machine" in line)
    assert line.endswith("| 810 / 598 | BF16 dispatch, BF16 combine | 700 / 500 (BF16) |")


def test_plot_is_skipped_without_matplotlib(launches, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    note = report.plot(report.merge(launches), str(tmp_path / "e2e.svg"))
    assert note.startswith("matplotlib is not importable here")
    assert not (tmp_path / "e2e.svg").exists()


def test_plot_where_matplotlib_is_installed(launches, tmp_path):
    pytest.importorskip("matplotlib")
    assert report.plot(report.merge(launches), str(tmp_path / "e2e.svg")) is None
    assert (tmp_path / "e2e.svg").read_text().lstrip().startswith("<?xml")


def test_main_writes_the_section(launches, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "plot", lambda merged, path: "skipped in this test")
    assert report.main(["--out", str(tmp_path), *launches]) == 0
    text = (tmp_path / "e2e-results.md").read_text()
    assert text.startswith("## Measured") and "No plot: skipped in this test." in text
    assert text in capsys.readouterr().out
