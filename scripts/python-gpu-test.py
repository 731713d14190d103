#!/usr/bin/env python3
"""The `weft` Python package on GPUs: every collective of weft.Communicator checked element by
element against torch.distributed on NCCL with the same inputs, tensors crossing as torch
tensors, DLPack and the CUDA array interface, weft's errors as Python exceptions, and a CUDA
graph of weft calls captured once and replayed twice on new inputs.

    scripts/python-wheel.sh --release        # on a machine with Rust: the wheel, then on the GPU machine
    /opt/torch/.venv/bin/python -m pip install --no-deps --force-reinstall weft-*.whl
    torchrun --nproc-per-node 2 scripts/python-gpu-test.py

Keep NVLink multicast off (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Inputs are
small integers, so sums, products and averages are exact in every type and weft must match NCCL
bit for bit. Prints one line per check and `N passed, M failed` on rank 0; exits non-zero on a
failure.
"""

import sys

import torch
import torch.distributed as dist
import torch.utils.dlpack

import weft
from weft._torchrun import init_process_group


class DLPackView:
    """A tensor seen only through DLPack."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


class ArrayView:
    """A tensor seen only through the CUDA array interface."""

    def __init__(self, t):
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class Raw:
    """An address that is not device memory, through the CUDA array interface."""

    def __init__(self, ptr, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def main() -> int:
    rank, world, dev = init_process_group()
    local = dev.index
    passed, failed = 0, 0

    def verdict(name, ok):
        nonlocal passed, failed
        flag = torch.tensor([int(ok)], device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        everywhere = bool(flag.item())
        passed, failed = passed + everywhere, failed + (not everywhere)
        if rank == 0:
            print(f"{'ok  ' if everywhere else 'FAIL'} {name}", flush=True)

    def same(name, got, want, exact=True):
        torch.cuda.synchronize()
        if exact:
            ok = got.shape == want.shape and torch.equal(got, want)
        else:
            ok = torch.allclose(got.double(), want.double(), rtol=1e-3, atol=1e-3)
        if not ok:
            print(f"rank {rank}: {name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}",
                  file=sys.stderr, flush=True)
        verdict(name, ok)

    def raises(name, kind, call, text):
        try:
            call()
        except kind as e:
            ok = text in str(e)
            if not ok:
                print(f"rank {rank}: {name}: message {e}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
            print(f"rank {rank}: {name}: raised {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            ok = False
        else:
            ok = False
        verdict(name, ok)

    comm = weft.Communicator.from_process_group()
    verdict(f"from_process_group: {comm}", (comm.rank, comm.world_size, comm.device) == (rank, world, local))
    gen = torch.Generator().manual_seed(1234 + rank)

    def values(n, dtype, low=-8, high=8):
        return torch.randint(low, high, (n,), generator=gen).to(dtype).to(dev)

    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        for count in (1, 1000, 1 << 20):
            tag = f"{dtype} x{count}"
            for name, op in ops.items():
                if name == "avg" and not dtype.is_floating_point:
                    continue
                low, high = (-2, 3) if name == "prod" else (-8, 8)
                x = values(count, dtype, low, high)
                want = x.clone()
                dist.all_reduce(want, op=op)
                got = x.clone()
                comm.all_reduce(got, op)  # torch.distributed's operator values
                same(f"all_reduce {name} in place {tag}", got, want, exact=name != "avg")
                out = torch.empty_like(x)
                comm.all_reduce(x, name, out=out)
                same(f"all_reduce {name} out of place {tag}", out, want, exact=name != "avg")

            x = values(count, dtype)
            want = torch.empty(world * count, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(want, x)
            got = torch.empty_like(want)
            comm.all_gather_into_tensor(got, x)
            same(f"all_gather_into_tensor {tag}", got, want)
            pieces = [torch.empty_like(x) for _ in range(world)]
            comm.all_gather(pieces, x)  # separate tensors: sends and receives
            same(f"all_gather (list) {tag}", torch.cat(pieces), want)
            views = torch.empty_like(want)
            comm.all_gather(list(views.view(world, count)), x)  # views of one tensor: one AllGather
            same(f"all_gather (views) {tag}", views, want)

            big = values(world * count, dtype)
            want = torch.empty(count, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(want, big)
            got = torch.empty_like(want)
            comm.reduce_scatter_tensor(got, big)
            same(f"reduce_scatter_tensor {tag}", got, want)
            got = torch.empty_like(want)
            comm.reduce_scatter(got, list(big.view(world, count)))
            same(f"reduce_scatter (views) {tag}", got, want)

            for root in range(world):
                x = values(count, dtype)
                want = x.clone()
                dist.broadcast(want, src=root)
                got = x.clone()
                comm.broadcast(got, src=root)
                same(f"broadcast root {root} {tag}", got, want)
                want = x.clone()
                dist.reduce(want, dst=root)
                got = x.clone()
                comm.reduce(got, dst=root)
                same(f"reduce root {root} {tag}", got if rank == root else want, want)

            x = values(world * count, dtype)
            want = torch.empty_like(x)
            dist.all_to_all_single(want, x)
            got = torch.empty_like(x)
            comm.all_to_all_single(got, x)
            same(f"all_to_all_single {tag}", got, want)
            comm.all_to_all_single(x, x)
            same(f"all_to_all_single in place {tag}", x, want)
            # Uneven splits: rank r sends r + p + 1 rows to rank p.
            send_splits = [rank + p + 1 for p in range(world)]
            recv_splits = [p + rank + 1 for p in range(world)]
            rows = values(sum(send_splits) * 4, dtype).view(-1, 4)
            want = torch.empty(sum(recv_splits), 4, dtype=dtype, device=dev)
            dist.all_to_all_single(want, rows, recv_splits, send_splits)
            got = torch.empty_like(want)
            comm.all_to_all_single(got, rows, recv_splits, send_splits)
            same(f"all_to_all_single uneven {tag}", got, want)

            # A ring of sends and receives.
            x = values(count, dtype)
            want = torch.empty_like(x)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % world),
                                           dist.P2POp(dist.irecv, want, (rank - 1) % world)])
            for r in reqs:
                r.wait()
            got = torch.empty_like(x)
            comm.batch_isend_irecv([weft.P2POp("send", x, (rank + 1) % world),
                                    weft.P2POp("recv", got, (rank - 1) % world)])
            same(f"batch_isend_irecv ring {tag}", got, want)
            got = torch.empty_like(x)
            if rank % 2 == 0:
                comm.send(x, (rank + 1) % world)
                comm.recv(got, (rank - 1) % world)
            else:
                comm.recv(got, (rank - 1) % world)
                comm.send(x, (rank + 1) % world)
            same(f"send/recv ring {tag}", got, want)

    # Tensors crossing by DLPack and by the CUDA array interface.
    x = values(4096, torch.float32)
    want = x.clone()
    dist.all_reduce(want)
    got = x.clone()
    comm.all_reduce(DLPackView(got))
    same("all_reduce through DLPack", got, want)
    got = x.clone()
    comm.all_reduce(torch.utils.dlpack.to_dlpack(got))
    same("all_reduce through a DLPack capsule", got, want)
    got = x.clone()
    comm.all_reduce(ArrayView(got))
    same("all_reduce through __cuda_array_interface__", got, want)

    # Errors: refused at the boundary, or by weft with its own message.
    raises("host tensor is a ValueError", ValueError, lambda: comm.all_reduce(torch.ones(4)), "tensor: must be CUDA")
    if torch.cuda.device_count() > 1:
        other = torch.ones(4, device=(local + 1) % torch.cuda.device_count())
        raises("tensor of another GPU is a ValueError", ValueError, lambda: comm.all_reduce(other), "tensor: must be on cuda:")
    raises("non-contiguous tensor is a ValueError", ValueError,
           lambda: comm.all_reduce(torch.ones(8, 8, device=dev).t()), "tensor: must be contiguous")
    raises("an address outside GPU memory is weft's InvalidArgumentError", weft.InvalidArgumentError,
           lambda: comm.all_reduce(Raw(0x1000, 16)), f"rank {rank}: invalid argument")

    # A CUDA graph of weft calls, captured once (after an eager run of each shape compiled its
    # kernels) and replayed twice on new inputs.
    n = 1 << 16
    static_in = values(n, torch.bfloat16)
    static_big = values(world * n, torch.bfloat16)
    static_sum = torch.empty_like(static_in)
    static_gather = torch.empty(world * n, dtype=torch.bfloat16, device=dev)
    static_scatter = torch.empty_like(static_in)

    def calls():
        comm.all_reduce(static_in, out=static_sum)
        comm.all_gather_into_tensor(static_gather, static_in)
        comm.reduce_scatter_tensor(static_scatter, static_big)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls()
    for replay in range(2):
        static_in.copy_(values(n, torch.bfloat16))
        static_big.copy_(values(world * n, torch.bfloat16))
        graph.replay()
        want = static_in.clone()
        dist.all_reduce(want)
        same(f"graph replay {replay}: all_reduce", static_sum, want)
        want = torch.empty_like(static_gather)
        dist.all_gather_into_tensor(want, static_in)
        same(f"graph replay {replay}: all_gather_into_tensor", static_gather, want)
        want = torch.empty_like(static_scatter)
        dist.reduce_scatter_tensor(want, static_big)
        same(f"graph replay {replay}: reduce_scatter_tensor", static_scatter, want)

    # The communicator torchrun's variables describe (weft's own rendezvous).
    try:
        own = weft.Communicator.from_torchrun()
        x = values(1000, torch.float32)
        want = x.clone()
        dist.all_reduce(want)
        own.all_reduce(x)
        same(f"from_torchrun: {own} all_reduce", x, want)
    except weft.WeftError as e:
        print(f"rank {rank}: from_torchrun: {e}", file=sys.stderr, flush=True)
        verdict("from_torchrun", False)

    torch.cuda.synchronize()
    if rank == 0:
        print(f"{passed} passed, {failed} failed", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
