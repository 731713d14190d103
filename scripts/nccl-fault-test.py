#!/usr/bin/env python3
"""One rank process killed with SIGKILL in the middle of an all-reduce loop through the NCCL C
API, eager and under a CUDA graph: every survivor must see ncclCommGetAsyncError report the
failure within WEFT_TIMEOUT + 1 s of the kill, ncclCommAbort must return, the survivor's stream
must drain (no kernel left spinning), and a new communicator among the survivors must all-reduce
correctly.

    WEFT_TIMEOUT=2 python3 scripts/nccl-fault-test.py target/nccl/libnccl.so.2

One rank per GPU (at least 2); the last rank is killed. PyTorch only provides device memory,
streams and graphs. Prints one line per check and `N passed, M failed`; exits non-zero on a
failure.
"""

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import time

FLOAT32, SUM = 7, 0
COUNT = 1 << 20
# What a survivor may take beyond WEFT_TIMEOUT to report the death, to abort, and to drain.
SLACK = 1.0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def nccl_lib(path):
    lib = ctypes.CDLL(path)
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.restype = ctypes.c_char_p

    def call(name, *args):
        code = getattr(lib, name)(*args)
        if code != 0:
            raise RuntimeError(f"{name}: {lib.ncclGetErrorString(code).decode()}")

    return lib, call


def init(call, uid, nranks, rank):
    comm = ctypes.c_void_p()
    call("ncclCommInitRank", ctypes.byref(comm), nranks, uid, rank)
    return comm


def rank_main(path, rank, nranks, graph, pipe):
    import torch

    torch.cuda.set_device(rank)
    lib, call = nccl_lib(path)
    uid = UniqueId()
    if rank == 0:
        call("ncclGetUniqueId", ctypes.byref(uid))
        pipe.send(bytes(uid))
    uid = UniqueId.from_buffer_copy(pipe.recv())
    comm = init(call, uid, nranks, rank)
    buf = torch.ones(COUNT, device="cuda")
    stream = torch.cuda.Stream()

    def all_reduce(comm, tensor):
        call("ncclAllReduce", ctypes.c_void_p(tensor.data_ptr()), ctypes.c_void_p(tensor.data_ptr()),
             ctypes.c_size_t(tensor.numel()), FLOAT32, SUM, comm, ctypes.c_void_p(stream.cuda_stream))

    with torch.cuda.stream(stream):
        if graph:
            g = torch.cuda.CUDAGraph()
            all_reduce(comm, buf)  # warm-up outside the capture
            stream.synchronize()
            with torch.cuda.graph(g, stream=stream):
                all_reduce(comm, buf)
            step = g.replay
        else:
            step = lambda: all_reduce(comm, buf)  # noqa: E731
        step()
    stream.synchronize()
    pipe.send("ready")
    code = ctypes.c_int(0)
    refused = ""
    while True:  # the loop the kill interrupts; the parent's deadline bounds it
        try:
            with torch.cuda.stream(stream):
                step()
        except RuntimeError as e:  # a failed communicator may refuse new work
            refused = str(e)
        # Until the step completes or the communicator reports a failure (checked once more
        # after completion: a wait that timed out ends its kernel).
        while True:
            call("ncclCommGetAsyncError", comm, ctypes.byref(code))
            if code.value != 0 or stream.query():
                break
            time.sleep(0.001)
        call("ncclCommGetAsyncError", comm, ctypes.byref(code))
        if code.value != 0 or refused:
            break
    seen = time.monotonic()
    why = (lib.ncclGetLastError(comm) or b"").decode(errors="replace") + (f" (refused: {refused})" if refused else "")
    call("ncclCommAbort", comm)
    aborted = time.monotonic()
    drain_by = time.monotonic() + float(os.environ.get("WEFT_TIMEOUT", "5")) + SLACK
    while not stream.query() and time.monotonic() < drain_by:
        time.sleep(0.001)
    drained = stream.query()
    pipe.send(("error", seen, aborted, drained, code.value, why))
    # A new communicator among the survivors (the parent passes the survivors' id).
    survivors = nranks - 1
    if rank == 0:
        call("ncclGetUniqueId", ctypes.byref(uid))
        pipe.send(bytes(uid))
    uid = UniqueId.from_buffer_copy(pipe.recv())
    fresh = init(call, uid, survivors, rank)
    data = torch.full((4096,), float(rank + 1), device="cuda")
    all_reduce(fresh, data)
    stream.synchronize()
    expected = survivors * (survivors + 1) / 2
    pipe.send(("fresh", bool(torch.all(data == expected).item())))
    call("ncclCommDestroy", fresh)


def run(path, nranks, graph, check):
    mode = "graph" if graph else "eager"
    timeout = float(os.environ.get("WEFT_TIMEOUT", "5"))
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for rank in range(nranks):
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=rank_main, args=(path, rank, nranks, graph, theirs))
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    victim = nranks - 1
    survivors = range(victim)

    def recv(rank, until):
        if pipes[rank].poll(max(0.0, until - time.monotonic())):
            return pipes[rank].recv()
        raise TimeoutError(f"{mode}: rank {rank} said nothing in time")

    try:
        start_by = time.monotonic() + 120
        uid = recv(0, start_by)
        for rank in range(1, nranks):
            pipes[rank].send(uid)
        pipes[0].send(uid)
        for rank in range(nranks):
            check(f"{mode}: rank {rank} runs the loop", recv(rank, start_by) == "ready")
        os.kill(procs[victim].pid, signal.SIGKILL)
        killed = time.monotonic()
        report_by = killed + timeout + SLACK + 5
        for rank in survivors:
            _, seen, aborted, drained, code, why = recv(rank, report_by)
            print(f"{mode}: rank {rank}: error {code} after {seen - killed:.3f} s ({why}); "
                  f"ncclCommAbort took {aborted - seen:.3f} s")
            check(f"{mode}: rank {rank}'s ncclCommGetAsyncError reports a failure", code != 0)
            check(f"{mode}: rank {rank} reports the death within WEFT_TIMEOUT + 1 s",
                  seen - killed <= timeout + SLACK)
            check(f"{mode}: rank {rank}'s error names rank {victim}", f"peer {victim}" in why)
            check(f"{mode}: rank {rank}'s ncclCommAbort returns within WEFT_TIMEOUT + 1 s",
                  aborted - seen <= timeout + SLACK)
            check(f"{mode}: rank {rank}'s stream drains after the abort (no kernel left spinning)", drained)
        uid = recv(0, report_by + 30)
        for rank in survivors:
            pipes[rank].send(uid)
        for rank in survivors:
            _, ok = recv(rank, report_by + 60)
            check(f"{mode}: rank {rank} all-reduces on a new communicator of the survivors", ok)
    except TimeoutError as e:
        check(str(e), False)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


def main():
    import torch

    path = sys.argv[1]
    nranks = torch.cuda.device_count()
    if nranks < 2:
        print("needs 2 or more GPUs")
        return 2
    passed, failed = 0, 0

    def check(name, ok):
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)

    for graph in (False, True):
        run(path, nranks, graph, check)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
