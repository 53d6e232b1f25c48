"""Weight payloads on the wire: named tensors <-> safetensors-format byte buffers <-> files in /dev/shm.

Why safetensors bytes: a uint8 numpy buffer is stored zero-copy in Ray's object store and read back zero-copy on
the same node; every dtype (bf16 included) survives; and the replica can hand vLLM's worker process a file path,
because tensors nested in vLLM `collective_rpc` arguments arrive as plain lists.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import numpy as np

DEFAULT_CHUNK_BYTES = 1 << 30  # bounds the trainer's extra host memory during one sync to about this much
SHM_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def encode_tensors(tensors: Mapping[str, "torch.Tensor"], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[np.ndarray]:
    """Split `tensors` into chunks of about `chunk_bytes` and serialise each to a safetensors uint8 buffer."""
    return list(iter_encoded_chunks(tensors.items(), chunk_bytes))


def iter_encoded_chunks(pairs: Iterable[tuple[str, "torch.Tensor"]], chunk_bytes: int = DEFAULT_CHUNK_BYTES
                        ) -> Iterator[np.ndarray]:
    """Safetensors uint8 buffers of about `chunk_bytes` each, from (name, tensor) pairs pulled only as a chunk fills:
    a chunk is yielded (and its tensors dropped) before the next pair is pulled, so a stream from the engine never
    holds the whole state dict."""
    from safetensors.torch import save

    chunk: dict = {}
    size = 0
    seen: set = set()  # storages in this chunk: safetensors refuses shared storage (tied weights) within a file
    for name, tensor in pairs:
        tensor = tensor.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > chunk_bytes:
            yield np.frombuffer(save(chunk), dtype=np.uint8)
            chunk, size, seen = {}, 0, set()
        if tensor.untyped_storage().data_ptr() in seen:
            tensor = tensor.clone()
        seen.add(tensor.untyped_storage().data_ptr())
        chunk[name] = tensor.contiguous()
        size += nbytes
    if not chunk:
        raise ValueError("weight payload is empty: no tensors to send")
    yield np.frombuffer(save(chunk), dtype=np.uint8)


def decode_tensors(buffers: Iterable[np.ndarray]) -> dict[str, "torch.Tensor"]:
    """Inverse of `encode_tensors` (copies into fresh tensors); for tests and the transformers fallback."""
    from safetensors.torch import load

    out: dict = {}
    for buf in buffers:
        out.update(load(bytes(memoryview(buf))))
    return out


def stage_dir(tag: str) -> Path:
    """A private scratch folder in shared memory for one replica's staged payloads."""
    path = Path(SHM_ROOT) / f"rayrl-rollout-{tag}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_buffer(buf: np.ndarray, path: Path) -> Path:
    """Write one safetensors buffer to `path` atomically (no reader ever sees half a file)."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(memoryview(buf))
    os.replace(tmp, path)
    return path


def write_full_weights(buffers: list[np.ndarray], folder: Path) -> list[str]:
    """Stage a full-weights payload as `chunk-XXXXX.safetensors` files; returns their paths in order."""
    folder.mkdir(parents=True, exist_ok=True)
    return [str(write_buffer(buf, folder / f"chunk-{i:05d}.safetensors")) for i, buf in enumerate(buffers)]


def write_peft_adapter(adapter_config: Mapping, buffers: list[np.ndarray], folder: Path) -> str:
    """Stage a LoRA payload as a peft folder (adapter_config.json + adapter_model.safetensors)."""
    if len(buffers) != 1:
        raise ValueError(f"a LoRA payload must be one safetensors buffer, got {len(buffers)}: raise chunk_bytes")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(dict(adapter_config)))
    write_buffer(buffers[0], folder / "adapter_model.safetensors")
    return str(folder)


def iter_safetensors(paths: Iterable[str]) -> Iterator[tuple[str, "torch.Tensor"]]:
    """Yield (name, tensor) from safetensors files one tensor at a time (memory-mapped, no full copy)."""
    from safetensors import safe_open

    for path in paths:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def weights_sum(tensors: Iterable["torch.Tensor"]) -> float:
    """The float64 sum of each tensor's float64 sum: the same for the trainer's tensors and for vLLM's fused q/k/v and
    gate/up ones, which hold the same elements; `math.fsum` keeps it independent of the tensors' order."""
    import math

    import torch

    return math.fsum(float(t.detach().sum(dtype=torch.float64)) for t in tensors)


def remove_quietly(path: str | Path) -> None:
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
