#!/usr/bin/env python3
"""One process driving every GPU through the NCCL C API (the ncclCommInitAll pattern), checked
element by element against a float64 reference: ncclCommInitAll, collectives of every
communicator issued from one thread inside one group, a send/recv ring inside a group,
ncclCommSplit of every communicator inside one group and collectives on the halves, the query
calls, then ncclCommFinalize and ncclCommDestroy.

    python3 scripts/nccl-single-process-test.py target/nccl/libnccl.so.2   # weft
    python3 scripts/nccl-single-process-test.py /path/to/nvidia/nccl/lib/libnccl.so.2  # real NCCL

PyTorch only provides device memory and streams. Keep NVLink multicast off
(NCCL_NVLS_ENABLE=0). Prints one line per check and `N passed, M failed`; exits non-zero on a
failure.
"""

import ctypes
import sys

import torch

FLOAT32, SUM, MAX = 7, 0, 2
SPLIT_NOCOLOR = -1


class Nccl:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p
        self.lib.ncclGetLastError.restype = ctypes.c_char_p

    def __call__(self, name: str, *args):
        code = getattr(self.lib, name)(*args)
        if code != 0:
            why = self.lib.ncclGetLastError(None).decode(errors="replace")
            raise RuntimeError(f"{name}: {self.lib.ncclGetErrorString(code).decode()} ({why})")

    def group(self, calls):
        self("ncclGroupStart")
        try:
            for name, *args in calls:
                self(name, *args)
        finally:
            self("ncclGroupEnd")


def main() -> int:
    nccl = Nccl(sys.argv[1])
    ndev = torch.cuda.device_count()
    if ndev < 2:
        print("needs 2 or more GPUs")
        return 2
    version = ctypes.c_int()
    nccl("ncclGetVersion", ctypes.byref(version))
    print(f"{sys.argv[1]}: version {version.value}, {ndev} GPUs")
    passed, failed = 0, 0

    def check(name, ok):
        nonlocal passed, failed
        passed, failed = passed + ok, failed + (not ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)

    comms = (ctypes.c_void_p * ndev)()
    nccl("ncclCommInitAll", comms, ndev, None)
    devs = [torch.device("cuda", i) for i in range(ndev)]
    streams = [torch.cuda.Stream(device=d) for d in devs]

    def sync():
        for s in streams:
            s.synchronize()

    for i in range(ndev):
        count, device, rank = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        nccl("ncclCommCount", ctypes.c_void_p(comms[i]), ctypes.byref(count))
        nccl("ncclCommCuDevice", ctypes.c_void_p(comms[i]), ctypes.byref(device))
        nccl("ncclCommUserRank", ctypes.c_void_p(comms[i]), ctypes.byref(rank))
        check(f"comm {i}: count/device/rank", (count.value, device.value, rank.value) == (ndev, i, i))

    gen = torch.Generator().manual_seed(7)

    def inputs(count, n=ndev):
        return [torch.randint(-50, 50, (count,), generator=gen).to(torch.float64) for _ in range(n)]

    def collective(name, comms_, devs_, streams_, ins, out_count, make_call, want):
        """Issues one collective per communicator in one group, poisons outputs first, checks each."""
        srcs = [x.to(torch.float32).to(d) for x, d in zip(ins, devs_)]
        outs = [torch.full((out_count,), float("nan"), dtype=torch.float32, device=d) for d in devs_]
        for d in devs_:
            torch.cuda.synchronize(d)
        nccl.group([make_call(c, s, o, st) for c, s, o, st in zip(comms_, srcs, outs, streams_)])
        for st in streams_:
            st.synchronize()
        ok = all(torch.equal(o.double().cpu(), w) for o, w in zip(outs, want))
        check(name, ok)

    for count in (1, 4099, 1 << 20):
        ins = inputs(count)
        collective(
            f"all_reduce sum x{count}, {ndev} comms in one group", comms, devs, streams, ins, count,
            lambda c, s, o, st: ("ncclAllReduce", ctypes.c_void_p(s.data_ptr()), ctypes.c_void_p(o.data_ptr()),
                                 ctypes.c_size_t(count), FLOAT32, SUM, ctypes.c_void_p(c), ctypes.c_void_p(st.cuda_stream)),
            [sum(ins)] * ndev)
        collective(
            f"all_reduce max x{count}", comms, devs, streams, ins, count,
            lambda c, s, o, st: ("ncclAllReduce", ctypes.c_void_p(s.data_ptr()), ctypes.c_void_p(o.data_ptr()),
                                 ctypes.c_size_t(count), FLOAT32, MAX, ctypes.c_void_p(c), ctypes.c_void_p(st.cuda_stream)),
            [torch.stack(ins).max(0).values] * ndev)
        collective(
            f"all_gather x{count}", comms, devs, streams, ins, count * ndev,
            lambda c, s, o, st: ("ncclAllGather", ctypes.c_void_p(s.data_ptr()), ctypes.c_void_p(o.data_ptr()),
                                 ctypes.c_size_t(count), FLOAT32, ctypes.c_void_p(c), ctypes.c_void_p(st.cuda_stream)),
            [torch.cat(ins)] * ndev)

        # A ring of send/recv pairs, every communicator's pair in one group.
        srcs = [x.to(torch.float32).to(d) for x, d in zip(ins, devs)]
        outs = [torch.full((count,), float("nan"), dtype=torch.float32, device=d) for d in devs]
        for d in devs:
            torch.cuda.synchronize(d)
        calls = []
        for r in range(ndev):
            st = ctypes.c_void_p(streams[r].cuda_stream)
            calls.append(("ncclSend", ctypes.c_void_p(srcs[r].data_ptr()), ctypes.c_size_t(count), FLOAT32,
                          (r + 1) % ndev, ctypes.c_void_p(comms[r]), st))
            calls.append(("ncclRecv", ctypes.c_void_p(outs[r].data_ptr()), ctypes.c_size_t(count), FLOAT32,
                          (r - 1) % ndev, ctypes.c_void_p(comms[r]), st))
        nccl.group(calls)
        sync()
        check(f"send/recv ring x{count}",
              all(torch.equal(outs[r].double().cpu(), ins[(r - 1) % ndev]) for r in range(ndev)))

    # Split into even and odd ranks (every communicator's split in one group), then reduce on each half.
    halves = (ctypes.c_void_p * ndev)()
    nccl.group([("ncclCommSplit", ctypes.c_void_p(comms[r]), r % 2, r, ctypes.byref(halves, r * ctypes.sizeof(ctypes.c_void_p)), None)
                for r in range(ndev)])
    for color in (0, 1):
        members = [r for r in range(ndev) if r % 2 == color]
        sizes = []
        for r in members:
            n = ctypes.c_int()
            nccl("ncclCommCount", ctypes.c_void_p(halves[r]), ctypes.byref(n))
            sizes.append(n.value)
        check(f"split color {color}: {len(members)} ranks each", sizes == [len(members)] * len(members))
        count = 12345
        ins = inputs(count, len(members))
        collective(
            f"all_reduce sum x{count} on split color {color}", [halves[r] for r in members], [devs[r] for r in members],
            [streams[r] for r in members], ins, count,
            lambda c, s, o, st: ("ncclAllReduce", ctypes.c_void_p(s.data_ptr()), ctypes.c_void_p(o.data_ptr()),
                                 ctypes.c_size_t(count), FLOAT32, SUM, ctypes.c_void_p(c), ctypes.c_void_p(st.cuda_stream)),
            [sum(ins)] * len(members))

    # Finalize waits for the peers of a communicator, so one thread finalizes all of them in a group.
    for handles in (halves, comms):
        nccl.group([("ncclCommFinalize", ctypes.c_void_p(handles[r])) for r in range(ndev)])
        for r in range(ndev):
            nccl("ncclCommDestroy", ctypes.c_void_p(handles[r]))
    print("finalized and destroyed every communicator")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
