"""The end-to-end benchmarks' shapes and arguments (bench/e2e), without torch: the published
configurations of Llama 3.1 8B/70B/405B and DeepSeek-V3, how tensor and expert parallelism split
them, and the command lines of tp_decode and ep_moe."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import e2e
from e2e import cli, shapes


def test_the_plain_modules_import_without_torch():
    # A fresh interpreter in which `import torch` fails, wherever torch is installed.
    code = "import sys; sys.modules['torch'] = None; import e2e.shapes, e2e.cli, e2e.results, e2e.report"
    env = dict(os.environ, PYTHONPATH=str(Path(e2e.__file__).parents[1]))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize(
    "key,hidden,layers,heads,kv_heads,intermediate,billions",
    [
        ("8b", 4096, 32, 32, 8, 14336, 8.03),
        ("70b", 8192, 80, 64, 8, 28672, 70.55),
        ("405b", 16384, 126, 128, 8, 53248, 405.85),
    ],
)
def test_llama_3_1_shapes(key, hidden, layers, heads, kv_heads, intermediate, billions):
    m = shapes.LLAMA[key]
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate) == (hidden, layers, heads, kv_heads, intermediate)
    assert m.head_dim * m.heads == hidden
    assert (m.rms_eps, m.rope_theta) == (1e-5, 500000.0)
    # The layers, the embeddings and the output head (128256 tokens, untied) and the final norm
    # make the published parameter count.
    assert round((m.layers * m.layer_params() + 2 * 128256 * hidden + hidden) / 1e9, 2) == billions


def test_tensor_parallel_shards():
    s = shapes.LLAMA["70b"].shard(4)
    assert (s.heads, s.kv_heads, s.intermediate) == (16, 2, 7168)
    assert s.qkv_rows == (16 + 2 * 2) * 128 and s.attention_width == 16 * 128
    assert s.allreduce_bytes(32) == 32 * 8192 * 2
    whole = shapes.LLAMA["70b"].shard(1)
    # Four shards hold the layer once, but for the replicated norms.
    assert 4 * s.weight_bytes() - whole.weight_bytes() == 3 * 2 * 8192 * 2
    assert whole.weight_bytes() == shapes.LLAMA["70b"].layer_params() * 2
    # The 405B layer fits one H100 with room for the reference, even unsharded.
    assert shapes.LLAMA["405b"].shard(2).weight_bytes() < 4 << 30


@pytest.mark.parametrize("tp,message", [(3, "do not split the 64 heads"), (16, "do not split the 8 kv_heads"),
                                        (0, "must be positive")])
def test_tensor_parallel_refusals(tp, message):
    with pytest.raises(ValueError, match=message):
        shapes.LLAMA["70b"].shard(tp)


def test_deepseek_v3_moe():
    m = shapes.DEEPSEEK_V3
    assert (m.hidden, m.experts, m.topk, m.expert_intermediate, m.shared_experts) == (7168, 256, 8, 2048, 1)
    assert (m.groups, m.topk_groups, m.routed_scaling, m.shared_intermediate) == (8, 4, 2.5, 2048)
    assert [m.local_experts(r) for r in (1, 2, 4, 8)] == [256, 128, 64, 32]
    assert m.expert_bytes() == 3 * 7168 * 2048 * 2
    with pytest.raises(ValueError, match="3 ranks do not split the 256 experts"):
        m.local_experts(3)
    assert (shapes.EP_PREFILL_TOKENS, shapes.EP_DECODE_TOKENS) == (4096, 128)


def test_tp_decode_defaults():
    a = cli.tp_args([], ranks=2)
    assert a.backends == ["nccl", "weft-python"] and a.models == ["70b"]
    assert a.batches == [1, 8, 32, 128] and (a.layers, a.context) == (0, 1024)
    assert (a.warmup, a.iters, a.check, a.json) == (2, 10, True, None)


def test_tp_decode_arguments():
    a = cli.tp_args(["--backends", "weft-nccl", "--models", "405b,8b,405b", "--batches", "32,1,256,1",
                     "--layers", "4", "--no-check", "--json", "tp.json"], ranks=4)
    assert a.backends == ["weft-nccl"] and a.models == ["405b", "8b"] and a.batches == [1, 32, 256]
    assert (a.layers, a.check, a.json) == (4, False, "tp.json")


@pytest.mark.parametrize(
    "argv,ranks,message",
    [
        (["--backends", "gloo"], 2, "'gloo' is not one of nccl"),
        (["--models", "7b"], 2, "'7b' is not one of 8b"),
        (["--batches", "0"], 2, "must be positive"),
        (["--batches", "1,x"], 2, "expected an integer"),
        (["--layers", "-1"], 2, "must not be negative"),
        ([], 3, "3 ranks do not split the 64 heads of Llama 3.1 70B"),
        (["--backends", "nccl,weft-nccl"], 2, "need separate launches"),
    ],
)
def test_tp_decode_refusals(argv, ranks, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.tp_args(argv, ranks)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_ep_moe_arguments():
    a = cli.ep_args([], ranks=2)
    assert a.variants == ["weft-normal", "weft-ll", "all-to-all"] and a.phases == ["prefill", "decode"]
    assert (a.prefill_tokens, a.decode_tokens, a.num_sms) == (4096, 128, 24)
    assert [cli.phase_tokens(a, p) for p in a.phases] == [4096, 128]
    a = cli.ep_args(["--variants", "all-to-all", "--phases", "decode", "--decode-tokens", "64"], ranks=8)
    assert (a.variants, a.phases, cli.phase_tokens(a, "decode")) == (["all-to-all"], ["decode"], 64)


@pytest.mark.parametrize(
    "argv,ranks,message",
    [
        (["--variants", "deepep"], 2, "'deepep' is not one of weft-normal"),
        (["--phases", "train"], 2, "'train' is not one of prefill"),
        (["--num-sms", "25"], 2, "must be even"),
        ([], 3, "3 ranks do not split the 256 experts"),
    ],
)
def test_ep_moe_refusals(argv, ranks, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.ep_args(argv, ranks)
    assert exit.value.code == 2
    assert message in capsys.readouterr().err
