"""Pure pieces of the rollout service: sampling options, the version error, payload encoding, batch chunking.

No Ray cluster and no vLLM engine: these run in milliseconds.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from serve.payload import (
    SafetensorsChunk,
    decode_tensors,
    encode_tensors,
    iter_encoded_chunks,
    iter_safetensors,
    write_full_weights,
    write_peft_adapter,
)
from serve.types import PolicyVersionMismatch, SamplingOptions


def test_sampling_from_config_uses_training_keys_or_val_kwargs():
    from app.config.schema import RolloutConfig

    cfg = replace(RolloutConfig(), temperature=0.6, top_p=0.9, top_k=20, n=4, response_length=32, ignore_eos=True)
    train = SamplingOptions.from_rollout_config(cfg)
    assert (train.temperature, train.top_p, train.top_k, train.n, train.max_tokens) == (0.6, 0.9, 20, 4, 32)
    assert train.do_sample and train.ignore_eos
    val = SamplingOptions.from_rollout_config(cfg, validation=True)
    # val_kwargs default to greedy with one sample (verl's validation), max_tokens still from response_length.
    assert val.greedy and val.n == 1 and val.max_tokens == 32


def test_sampling_needs_a_length_and_valid_values():
    from app.config.schema import RolloutConfig

    with pytest.raises(ValueError, match="response_length"):
        SamplingOptions.from_rollout_config(RolloutConfig())  # response_length defaults to None
    with pytest.raises(ValueError, match="top_k"):
        SamplingOptions(max_tokens=4, top_k=0)
    with pytest.raises(ValueError, match="do_sample=False for greedy"):
        SamplingOptions(max_tokens=4, temperature=0.0)
    assert SamplingOptions(max_tokens=4, temperature=0.0, do_sample=False).greedy


def test_version_mismatch_names_both_versions_and_survives_pickling():
    err = PolicyVersionMismatch(expected=3, actual=5, replica="abc")
    assert "expected version 3" in str(err) and "serves version 5" in str(err) and "abc" in str(err)
    back = pickle.loads(pickle.dumps(err))  # Ray pickles replica errors back to the caller
    assert (back.expected, back.actual, back.replica) == (3, 5, "abc")


def test_payload_round_trips_dtypes_and_splits_into_chunks(tmp_path):
    tensors = {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),  # bf16 has no numpy dtype: must survive as bytes
        "c": torch.ones(256, dtype=torch.float16),
    }
    # a (24 B) and b (4 B) fit under 100 bytes together; c (512 B) starts a second chunk.
    chunks = encode_tensors(tensors, chunk_bytes=100)
    assert len(chunks) == 2 and all(p.dtype == np.uint8 for b in chunks for p in b.parts)
    assert [b.nbytes for b in chunks] == [len(b.tobytes()) for b in chunks]
    back = decode_tensors(chunks)
    assert set(back) == set(tensors)
    for k in tensors:
        assert back[k].dtype == tensors[k].dtype and torch.equal(back[k], tensors[k])
    # Staged files stream back the same tensors, in order.
    paths = write_full_weights(chunks, tmp_path / "full")
    assert [n for n, _ in iter_safetensors(paths)] == ["a", "b", "c"]


def test_a_chunk_is_a_safetensors_file_for_every_dtype_shape_and_layout():
    from safetensors.torch import load

    tensors = {
        "f64": torch.tensor([1.0 / 3.0], dtype=torch.float64),
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "bf16": torch.tensor([[0.5, -3.0]], dtype=torch.bfloat16),
        "i64": torch.tensor([-(2**40)]),
        "i8": torch.tensor([-7, 7], dtype=torch.int8),
        "u8": torch.tensor([255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),  # not contiguous: copied in row order
    }
    data = SafetensorsChunk.of(tensors).tobytes()
    header_len = int.from_bytes(data[:8], "little")
    assert header_len % 8 == 0  # the tensors' bytes start aligned
    back = load(data)
    assert set(back) == set(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        assert torch.equal(back[name], tensor), name
    assert back["transposed"].tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    with pytest.raises(TypeError, match="complex"):
        SafetensorsChunk.of({"z": torch.zeros(1, dtype=torch.complex64)})


def test_a_stream_of_tensors_is_encoded_chunk_by_chunk_as_it_is_read():
    pulled = []

    def stream():  # what the trainer's engine yields: one gathered tensor at a time
        for i in range(5):
            pulled.append(i)
            yield f"t{i}", torch.full((25,), float(i))  # 100 bytes each

    chunks = iter_encoded_chunks(stream(), chunk_bytes=200)
    first = next(chunks)
    # the first chunk (t0, t1) is out when t2, which does not fit in it, has been pulled, and no later tensor
    assert pulled == [0, 1, 2] and set(decode_tensors([first])) == {"t0", "t1"}
    back = decode_tensors([first, *chunks])
    assert sorted(back) == [f"t{i}" for i in range(5)] and all(
        torch.equal(back[f"t{i}"], torch.full((25,), float(i))) for i in range(5)
    )
    with pytest.raises(ValueError, match="empty"):
        next(iter_encoded_chunks(iter(())))


def test_tied_tensors_are_sent_as_separate_copies():
    shared = torch.randn(4, 4)
    back = decode_tensors(encode_tensors({"model.embed_tokens.weight": shared, "lm_head.weight": shared}))
    assert torch.equal(back["lm_head.weight"], shared) and torch.equal(back["model.embed_tokens.weight"], shared)


def test_lora_payload_is_staged_as_a_peft_folder(tmp_path):
    chunks = encode_tensors({"base_model.model.x.lora_A.weight": torch.zeros(2, 3)})
    folder = write_peft_adapter({"r": 2, "peft_type": "LORA"}, chunks, tmp_path / "adapter")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert folder == str(tmp_path / "adapter")
    with pytest.raises(ValueError, match="one safetensors chunk"):
        write_peft_adapter({}, chunks * 2, tmp_path / "two")


def test_batches_are_split_for_every_replica_and_capped_by_engine_capacity():
    from app.config.schema import RolloutConfig
    from serve.client import RolloutClient

    client = RolloutClient("unused", replace(RolloutConfig(), replicas=2, max_num_seqs=4))
    # n=2 -> one engine schedules 4 // 2 = 2 prompts at once; 10 prompts over 2 replicas would be 5 each, so 2 win.
    assert client._chunks(10, n=2) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    # n=1 and a roomy engine: one chunk per replica, the last one shorter.
    roomy = RolloutClient("unused", replace(RolloutConfig(), replicas=2, max_num_seqs=1024))
    assert roomy._chunks(5, n=1) == [(0, 3), (3, 5)]


def test_dead_replicas_shared_memory_is_reaped_but_live_or_mapped_memory_is_kept(tmp_path):
    import mmap
    import os
    import subprocess

    from serve.shm import RECORD, reap_dead_replicas

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    dead = tmp_path / f"rayrl-rollout-app-r1-{gone.pid}"
    live = tmp_path / f"rayrl-rollout-app-r2-{os.getpid()}"
    for folder in (dead, live):
        folder.mkdir()
    (dead / RECORD).write_text("psm_free\npsm_held")
    (live / RECORD).write_text("psm_mine")
    for name in ("psm_free", "psm_held", "psm_mine"):
        (tmp_path / name).write_bytes(b"\0" * 4096)
    with open(tmp_path / "psm_held", "r+b") as f, mmap.mmap(f.fileno(), 4096):  # still mapped by a live process
        assert reap_dead_replicas(str(tmp_path)) == []  # the dead folder stays: one of its segments is in use
        assert not (tmp_path / "psm_free").exists() and (tmp_path / "psm_held").exists()
        assert (dead / RECORD).read_text() == "psm_held"
    assert reap_dead_replicas(str(tmp_path)) == [dead.name]  # unmapped now: reaped, folder and all
    assert not (tmp_path / "psm_held").exists() and not dead.exists()
    assert (tmp_path / "psm_mine").exists() and live.exists()  # a live replica's memory is never touched


def test_a_payload_is_staged_in_shared_memory_only_where_it_has_room(monkeypatch, tmp_path):
    """Containers often give /dev/shm 64 MiB: a payload that does not fit there (with headroom) goes to $TMPDIR."""
    import collections
    import tempfile

    from serve import payload

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    replica = Path(payload.SHM_ROOT) / "rayrl-rollout-app-r1-123"
    monkeypatch.setattr(payload.shutil, "disk_usage", lambda root: usage(64 << 20, 0, 64 << 20))
    assert payload.staging_folder(replica, 1 << 20, "v1") == tmp_path / replica.name / "v1"  # 1 MiB + headroom > 64
    monkeypatch.setattr(payload.shutil, "disk_usage", lambda root: usage(8 << 30, 0, 8 << 30))
    assert payload.staging_folder(replica, 1 << 30, "v2") == replica / "v2"
    # a replica whose own folder is already on disk stays there
    assert payload.staging_folder(tmp_path / "elsewhere", 1 << 40, "v3") == tmp_path / "elsewhere" / "v3"
    # the disk twin, which the replica removes when it stops, is its own folder, never the temporary folder itself
    assert payload.disk_twin(replica) == tmp_path / replica.name
    with pytest.raises(ValueError, match="is not a replica's staging folder"):
        payload.disk_twin(Path(payload.SHM_ROOT))
