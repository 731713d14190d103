"""``python -m weft.bench_ep`` without a GPU: its arguments, DeepEP's byte counts, the
statistics and the JSON rows. The measuring half needs torch and GPUs (scripts/gpu-suite.sh)."""

import json

import pytest

from weft import bench_ep as b


def test_defaults_are_deepep_s_intranode_shape():
    a = b.parse_args([], num_ranks=2)
    assert (a.num_tokens, a.hidden, a.num_topk, a.num_experts, a.ll_tokens) == (4096, 7168, 8, 256, 128)
    assert a.num_sms == [24, 32, 64, 128]
    assert (a.check, a.json, a.warmup, a.iters) == (True, None, 5, 30)


def test_arguments():
    a = b.parse_args(["--num-sms", "24,64", "--num-tokens", "128", "--no-check", "--json", "out.json",
                      "--ll-tokens", "0"], num_ranks=4)
    assert (a.num_sms, a.num_tokens, a.check, a.json, a.ll_tokens) == ([24, 64], 128, False, "out.json", 0)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--num-sms", "24,33"], "even and positive"),
        (["--num-sms", "24,x"], "comma-separated integers"),
        (["--num-tokens", "0"], "must be positive"),
        (["--ll-tokens", "-1"], "must not be negative"),
        (["--num-experts", "255"], "divisible by the 2 ranks"),
        (["--hidden", "7000"], "multiple of 128"),
        (["--num-topk", "9", "--num-experts", "8"], "exceeds --num-experts"),
    ],
)
def test_bad_arguments_exit_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        b.parse_args(argv, num_ranks=2)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_bytes_are_counted_as_deepep_counts_them():
    # test_intranode.py: received rows × 2H for BF16, × (1 + 4/128) / 2 for FP8; combine as BF16.
    assert b.dispatch_bytes(1000, 7168, fp8=False) == 1000 * 7168 * 2
    assert b.dispatch_bytes(1000, 7168, fp8=True) == pytest.approx(1000 * 7168 * 2 * 132 / 256)
    assert b.combine_bytes(1000, 7168) == 1000 * 7168 * 2
    # test_low_latency.py: per selected pair, H + H/128 × 4 + 16 (FP8) or 2H, and 2H for combine.
    assert b.ll_dispatch_bytes(1024, 7168, fp8=True) == 1024 * (7168 + 56 * 4 + 16)
    assert b.ll_dispatch_bytes(1024, 7168, fp8=False) == 1024 * 7168 * 2
    assert b.ll_combine_bytes(1024, 7168) == 1024 * 7168 * 2


def test_statistics_are_median_and_range():
    s = b.summarize([30.0, 10.0, 20.0, 1000.0])
    assert (s.median_us, s.min_us, s.max_us, s.samples) == (25.0, 10.0, 1000.0, 4)
    with pytest.raises(ValueError, match="^samples_us"):
        b.summarize([])


def test_rows_table_and_json():
    args = b.parse_args(["--num-sms", "24,64", "--json", "x.json"], num_ranks=2)
    rows = [
        b.row(r, "dispatch", "bf16", sms, 8000, b.dispatch_bytes(8000, 7168, False), b.summarize([400.0 / sms * 24]), True)
        for sms in args.num_sms for r in range(2)
    ]
    assert rows[0].gbps == pytest.approx(8000 * 7168 * 2 / 400.0 / 1e3)
    text = b.table(rows)
    assert len(text.splitlines()) == 5 and "400.0–400.0" in text
    doc = json.loads(json.dumps(b.document(args, 2, rows)))
    assert doc["num_ranks"] == 2 and "json" not in doc["settings"]
    assert doc["settings"]["num_sms"] == [24, 64]
    assert [(r["rank"], r["num_sms"]) for r in doc["rows"]] == [(0, 24), (1, 24), (0, 64), (1, 64)]
    assert set(doc["rows"][0]) >= {"op", "payload", "median_us", "min_us", "max_us", "gbps", "bytes", "checked"}


def test_the_pure_half_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, weft.bench_ep; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
