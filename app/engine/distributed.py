"""Process-group helpers. No Ray: the launcher (Ray Train, torchrun, a test's mp.spawn) sets up ranks; a lone
process gets a private one-rank group so the FSDP code path is the same everywhere.

The device is what the engine's spec says, not what torch can see: ``"cpu"`` never asks torch about CUDA (a CPU
config on a machine with a GPU trains on the CPU over gloo), ``"cuda"`` takes the GPU this process was given and
NCCL, and only ``"auto"`` (benchmarks) follows ``torch.cuda.is_available()``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

DEVICES = ("auto", "cpu", "cuda")


def backend_for(device_type: str) -> str:
    """The collective backend the engine's tensors need: NCCL for CUDA tensors, gloo for CPU ones."""
    return "nccl" if device_type == "cuda" else "gloo"


def ensure_process_group(device_type: str) -> None:
    """Initialise a one-rank group (gloo on CPU, NCCL on GPU) if nobody has initialised one; refuse a group whose
    backend cannot run collectives on ``device_type`` tensors (a launcher that picked the wrong one)."""
    if dist.is_initialized():
        backend = str(dist.get_backend()).lower()
        # a group made for both ("cpu:gloo,cuda:nccl") serves either device
        if backend_for(device_type) not in backend:
            raise RuntimeError(
                f"the engine runs on {device_type} but the process group's backend is {backend!r}; "
                f"start the workers with backend {backend_for(device_type)!r} (trainer.device and "
                "the launcher's backend must agree)"
            )
        return
    # an in-process store: no port to pick, no file to clean up, valid because there is exactly one rank
    dist.init_process_group(backend_for(device_type), store=dist.HashStore(), rank=0, world_size=1)


def assigned_cuda_index() -> int:
    """The GPU of this process among those it can see (``CUDA_VISIBLE_DEVICES`` already applied).

    One visible GPU (Ray gives each worker its own): that one. Several (torchrun, or Ray Train sharing a node's GPUs
    between its local workers): the one at ``LOCAL_RANK``. Neither: torch's current device."""
    count = torch.cuda.device_count()
    if count == 1:
        return 0
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None:
        index = int(local_rank)
        if not 0 <= index < count:
            raise RuntimeError(
                f"LOCAL_RANK={index} but this process sees {count} GPUs "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
            )
        return index
    return torch.cuda.current_device()


def pick_device(requested: str) -> torch.device:
    """The engine's device for ``EngineSpec.device``. ``"cuda"`` also makes that GPU the current one, so NCCL and
    every allocation without an explicit index use it."""
    if requested not in DEVICES:
        raise ValueError(f"engine device={requested!r}; use one of {DEVICES}")
    if requested == "cpu":
        return torch.device("cpu")  # decided without a CUDA call: a CPU run never initialises CUDA
    if requested == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"engine device={requested!r} but CUDA is not available "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    index = assigned_cuda_index()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def reduce_op(name: str) -> dist.ReduceOp:
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    if name not in ops and name != "mean":
        raise ValueError(f"unknown reduce op {name!r}; use sum, mean, max or min")
    return ops.get(name, dist.ReduceOp.SUM)
