"""Weight payloads on the wire: named tensors <-> safetensors files in parts (`SafetensorsChunk`) <-> files in
/dev/shm.

Why safetensors: uint8 numpy views are stored in Ray's object store with one copy and read back zero-copy on the
same node; every dtype (bf16 included) survives as bytes; and the replica can hand vLLM's worker process a file
path, because tensors nested in vLLM `collective_rpc` arguments arrive as plain lists.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

import numpy as np

if TYPE_CHECKING:  # torch is imported where the tensors are made
    import torch

DEFAULT_CHUNK_BYTES = 1 << 30  # bounds the trainer's extra host memory during one sync to about this much
SHM_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
# left free in /dev/shm beside a staged payload: vLLM's and NCCL's own segments live there too
SHM_HEADROOM_BYTES = 256 << 20


def encode_tensors(
    tensors: Mapping[str, "torch.Tensor"], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> list["SafetensorsChunk"]:
    """Split `tensors` into chunks of about `chunk_bytes`, each one safetensors file (`SafetensorsChunk`)."""
    return list(iter_encoded_chunks(tensors.items(), chunk_bytes))


def iter_encoded_chunks(
    pairs: Iterable[tuple[str, "torch.Tensor"]], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator["SafetensorsChunk"]:
    """Safetensors chunks of about `chunk_bytes` each, from (name, tensor) pairs pulled only as a chunk fills:
    a chunk is yielded (and its tensors dropped) before the next pair is pulled, so a stream from the engine never
    holds the whole state dict."""
    chunk: dict = {}
    size = 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > chunk_bytes:
            yield SafetensorsChunk.of(chunk)
            chunk, size = {}, 0
        chunk[name] = tensor
        size += nbytes
    if not chunk:
        raise ValueError("weight payload is empty: no tensors to send")
    yield SafetensorsChunk.of(chunk)


_SAFETENSORS_DTYPES = {  # torch dtype name -> safetensors dtype code
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


@dataclass
class SafetensorsChunk:
    """One safetensors file, unjoined: `header` (the 8-byte little-endian length and the JSON header, padded with
    spaces to a multiple of 8) and `parts`, each tensor's bytes as a uint8 view of it, in header order.

    Why unjoined: `ray.put` copies each part once, straight from the tensor into the object store, and the replica
    writes the parts one after the other into a file. Joining them first (as `safetensors.torch.save` does, through
    two more copies) cost 3-5 s of a 540 MB merged SmolLM2 sync on a 2-core box, where writing fresh memory is slow.
    """

    header: bytes
    parts: list[np.ndarray]

    @classmethod
    def of(cls, tensors: Mapping[str, "torch.Tensor"]) -> "SafetensorsChunk":
        import torch

        # widest dtype first, as safetensors orders them, so that each tensor starts at a multiple of its element size
        ordered = sorted(tensors.items(), key=lambda item: -item[1].element_size())
        header, parts, offset = {}, [], 0
        for name, tensor in ordered:
            code = _SAFETENSORS_DTYPES.get(str(tensor.dtype).removeprefix("torch."))
            if code is None:
                raise TypeError(f"tensor {name!r}: dtype {tensor.dtype} has no safetensors code")
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)  # no copy when already contiguous
            header[name] = {"dtype": code, "shape": list(tensor.shape), "data_offsets": [offset, offset + raw.numel()]}
            parts.append(raw.numpy())
            offset += raw.numel()
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return cls(header=len(text).to_bytes(8, "little") + text, parts=parts)

    @property
    def nbytes(self) -> int:
        return len(self.header) + sum(part.nbytes for part in self.parts)

    def write_to(self, file) -> None:
        file.write(self.header)
        for part in self.parts:
            file.write(memoryview(part))

    def tobytes(self) -> bytes:
        return self.header + b"".join(memoryview(part) for part in self.parts)


def decode_tensors(chunks: Iterable[SafetensorsChunk]) -> dict[str, "torch.Tensor"]:
    """Inverse of `encode_tensors` (copies into fresh tensors); for tests and the transformers fallback."""
    from safetensors.torch import load

    out: dict = {}
    for chunk in chunks:
        out.update(load(chunk.tobytes()))
    return out


def stage_dir(tag: str) -> Path:
    """A private scratch folder in shared memory for one replica's staged payloads."""
    path = Path(SHM_ROOT) / f"rayrl-rollout-{tag}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def staging_folder(shm_folder: Path, nbytes: int, name: str) -> Path:
    """Where to stage a payload of `nbytes`: `shm_folder/name` (RAM, the fast path) when /dev/shm has room for it
    and some headroom, else `disk_twin(shm_folder)/name` on disk, since containers often give /dev/shm only 64 MiB.
    Only the replica's own files go to either place."""
    if Path(SHM_ROOT) in shm_folder.parents and shutil.disk_usage(SHM_ROOT).free < nbytes + SHM_HEADROOM_BYTES:
        return disk_twin(shm_folder) / name
    return shm_folder / name


def disk_twin(shm_folder: Path) -> Path:
    """The replica's folder under the temporary folder on disk ($TMPDIR), named as its /dev/shm one."""
    if not shm_folder.name.startswith("rayrl-rollout-"):  # never a folder of anyone else's
        raise ValueError(f"{shm_folder} is not a replica's staging folder")
    return Path(tempfile.gettempdir()) / shm_folder.name


def write_chunk(chunk: SafetensorsChunk, path: Path) -> Path:
    """Write one safetensors chunk to `path` atomically (no reader ever sees half a file)."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        chunk.write_to(f)
    os.replace(tmp, path)
    return path


def full_weights_path(folder: Path, index: int) -> Path:
    """Where chunk `index` of a full-weights payload is staged: `chunk-XXXXX.safetensors`, in payload order."""
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"chunk-{index:05d}.safetensors"


def write_full_weights(chunks: list[SafetensorsChunk], folder: Path) -> list[str]:
    """Stage a full-weights payload as `chunk-XXXXX.safetensors` files; returns their paths in order."""
    return [str(write_chunk(chunk, full_weights_path(folder, i))) for i, chunk in enumerate(chunks)]


def write_peft_adapter(adapter_config: Mapping, chunks: list[SafetensorsChunk], folder: Path) -> str:
    """Stage a LoRA payload as a peft folder (adapter_config.json + adapter_model.safetensors)."""
    if len(chunks) != 1:
        raise ValueError(f"a LoRA payload must be one safetensors chunk, got {len(chunks)}: raise chunk_bytes")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(dict(adapter_config)))
    write_chunk(chunks[0], folder / "adapter_model.safetensors")
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
