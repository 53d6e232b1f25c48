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
    if not tensors:
        raise ValueError("weight payload is empty: no tensors to send")
    chunks: list[dict] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if chunks[-1] and size + nbytes > chunk_bytes:
            chunks.append({})
            size = 0
        chunks[-1][name] = tensor.detach()
        size += nbytes
    return [_safetensors_buffer(chunk) for chunk in chunks]


# safetensors' names for torch dtypes (https://github.com/huggingface/safetensors, format.md)
_SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL",
}


def _safetensors_buffer(chunk: Mapping[str, "torch.Tensor"]) -> np.ndarray:
    """One safetensors file image, each tensor's bytes copied once into a preallocated buffer.

    `safetensors.torch.save` makes several whole-payload copies on the way to `bytes` (4-6 s for SmolLM2-135M in
    fp32 on a 2-core CPU, most of a merged-LoRA sync); this writes the same format with one copy per tensor. Tensors
    are laid out largest element first, as safetensors does, so every tensor starts aligned to its element size.
    Tied tensors (one storage under two names) are simply written twice.
    """
    import torch

    order = sorted(chunk, key=lambda name: -chunk[name].element_size())
    header: dict = {}
    offset = 0
    for name in order:
        tensor = chunk[name]
        dtype = _SAFETENSORS_DTYPES.get(str(tensor.dtype).removeprefix("torch."))
        if dtype is None:
            raise TypeError(f"weight payload tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot hold")
        nbytes = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    buf = np.empty(8 + len(head) + offset, dtype=np.uint8)
    buf[:8] = np.frombuffer(len(head).to_bytes(8, "little"), dtype=np.uint8)
    buf[8:8 + len(head)] = np.frombuffer(head, dtype=np.uint8)
    out = torch.from_numpy(buf)
    start = 8 + len(head)
    for name in order:
        tensor = chunk[name]
        lo, hi = header[name]["data_offsets"]
        if tensor.numel():
            out[start + lo:start + hi].copy_(tensor.cpu().contiguous().reshape(-1).view(torch.uint8))
    return buf


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


def remove_quietly(path: str | Path) -> None:
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
