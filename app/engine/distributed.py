"""Process-group helpers. No Ray: the launcher (Ray Train, torchrun, a test's mp.spawn) sets up ranks; a lone
process gets a private one-rank group so the FSDP code path is the same everywhere."""
from __future__ import annotations

import torch
import torch.distributed as dist


def ensure_process_group(device_type: str) -> None:
    """Initialise a one-rank group (gloo on CPU, NCCL on GPU) if nobody has initialised one."""
    if dist.is_initialized():
        return
    backend = "nccl" if device_type == "cuda" else "gloo"
    # an in-process store: no port to pick, no file to clean up, valid because there is exactly one rank
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def pick_device(requested: str) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"engine device={requested!r} but CUDA is not available")
    return torch.device("cuda", torch.cuda.current_device())


def reduce_op(name: str) -> dist.ReduceOp:
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    if name not in ops and name != "mean":
        raise ValueError(f"unknown reduce op {name!r}; use sum, mean, max or min")
    return ops.get(name, dist.ReduceOp.SUM)
