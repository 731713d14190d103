"""torch.distributed for a process that torchrun started: the set-up the GPU scripts and
benches share (torch is imported only when called)."""

import os


def init_process_group():
    """Binds this process to GPU ``LOCAL_RANK``, initialises the default NCCL process group
    on it, and returns ``(rank, world_size, device)``."""
    import torch
    import torch.distributed as dist

    rank, ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=dev)
    return rank, ranks, dev
