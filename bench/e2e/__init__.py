"""End-to-end benchmarks: what a model's layers cost with each communication backend, on the
GPU machines (PyTorch, random weights of the real shapes, nothing downloaded).

- ``tp_decode``: the tensor-parallel decode step of Llama 3.1 8B / 70B / 405B layers (attention
  and MLP, column/row-parallel linears, one AllReduce after each), captured in a CUDA graph per
  batch size, through NCCL, weft's ``libnccl.so.2`` and ``weft.Communicator``.
- ``ep_moe``: the expert-parallel MoE layer of DeepSeek-V3 (prefill and decode) through
  ``weft.ep`` (normal and low-latency modes) and ``torch.distributed.all_to_all_single``.
- ``report``: merges the runs' JSON into the markdown table and plot of docs/perf/e2e.md.

``run.sh`` runs all of it (``scripts/gpu-suite.sh e2e``). The modules that hold shapes,
arguments, result rows and the report (``shapes``, ``cli``, ``results``, ``report``) import no
torch, so they are tested on machines without it (python/tests/test_e2e_*.py); the others need
torch and GPUs. All of them need the ``weft`` wheel: the argument types, timing statistics and
event timing are ``weft._bench``'s, shared with ``python -m weft.bench_ep``.
"""
