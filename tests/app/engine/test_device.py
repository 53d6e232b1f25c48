"""The engine's device is the spec's: "cpu" never touches CUDA, "cuda" takes the GPU this process was given."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from support import engine_spec

from app.engine import StepContext, make_engine
from app.engine.distributed import backend_for, ensure_process_group, pick_device


def _no_cuda_calls(monkeypatch):
    """Make every CUDA query an error, as it would be a bug for a CPU engine to make one."""

    def refuse(*args, **kwargs):
        raise AssertionError("a CPU engine asked torch about CUDA")

    for name in ("is_available", "device_count", "current_device", "set_device"):
        monkeypatch.setattr(torch.cuda, name, refuse)


class _FakeCuda:
    """torch.cuda as a process on an N-GPU machine sees it (records set_device)."""

    def __init__(self, monkeypatch, count: int) -> None:
        self.current = 0
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "set_device", self.set_device)

    def set_device(self, index: int) -> None:
        self.current = index


def test_cpu_is_decided_without_asking_cuda(monkeypatch):
    _no_cuda_calls(monkeypatch)
    assert pick_device("cpu") == torch.device("cpu")


def test_cuda_without_a_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="device='cuda' but CUDA is not available"):
        pick_device("cuda")
    assert pick_device("auto") == torch.device("cpu")  # benches: whatever the machine has


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="device='gpu'; use one of"):
        pick_device("gpu")


def test_cuda_takes_the_local_rank_gpu_of_several(monkeypatch):
    fake = _FakeCuda(monkeypatch, count=4)
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert pick_device("cuda") == torch.device("cuda", 2)
    assert fake.current == 2  # made current, so NCCL and unindexed allocations use it


def test_cuda_takes_the_one_visible_gpu_whatever_the_local_rank(monkeypatch):
    # Ray gives each worker its own GPU through CUDA_VISIBLE_DEVICES: index 0 of what it sees, at any LOCAL_RANK
    fake = _FakeCuda(monkeypatch, count=1)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert pick_device("cuda") == torch.device("cuda", 0)
    assert fake.current == 0


def test_local_rank_beyond_the_visible_gpus_is_an_error(monkeypatch):
    _FakeCuda(monkeypatch, count=2)
    monkeypatch.setenv("LOCAL_RANK", "5")
    with pytest.raises(RuntimeError, match="LOCAL_RANK=5 but this process sees 2 GPUs"):
        pick_device("cuda")


def test_backend_follows_the_device():
    assert backend_for("cuda") == "nccl"
    assert backend_for("cpu") == "gloo"


def test_a_gloo_group_is_refused_for_a_cuda_engine():
    ensure_process_group("cpu")  # a one-rank gloo group, unless an earlier test made one (also gloo)
    assert dist.get_backend() == "gloo"
    with pytest.raises(RuntimeError, match="backend is 'gloo'; start the workers with backend 'nccl'"):
        ensure_process_group("cuda")
    ensure_process_group("cpu")  # the same group serves a CPU engine


def test_cpu_engine_on_a_gpu_machine_trains_on_the_cpu(monkeypatch, tiny_llama_dir, make_rl_batch):
    """A CPU config on a machine whose torch sees GPUs: the engine stays on the CPU and never picks a GPU."""
    fake = _FakeCuda(monkeypatch, count=8)
    fake.set_device = lambda index: pytest.fail(f"a CPU engine selected GPU {index}")
    monkeypatch.setattr(torch.cuda, "set_device", fake.set_device)
    engine = make_engine("fsdp2", engine_spec(tiny_llama_dir, param_dtype="fp32", device="cpu"))
    assert engine.device == torch.device("cpu")
    # the model itself is built with CUDA reported absent again: torch's own helpers would believe the fake
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    engine.init_model()
    assert {p.device.type for p in engine.model.parameters()} == {"cpu"}
    out = engine.forward_backward_step(make_rl_batch([3, 2], [2, 2]), StepContext(), forward_only=True)
    assert out.outputs["log_probs"].device.type == "cpu"
