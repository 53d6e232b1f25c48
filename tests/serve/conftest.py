"""Fixtures for the rollout-service tests: a vLLM-compatible tiny model, a rollout config, and reference math."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import building

# vLLM's CPU attention kernels support these head sizes only (vllm/v1/attention/backends/cpu_attn.py).
VLLM_CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}


@pytest.fixture(scope="session")
def vllm_tiny_model_dir(tiny_model_dir: Path) -> Path:
    """The suite's tiny random Llama, or a copy widened to head_dim 64 when its head size is one vLLM-CPU lacks."""
    config = json.loads((Path(tiny_model_dir) / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if head_dim in VLLM_CPU_HEAD_SIZES:
        return Path(tiny_model_dir)
    out = Path(tiny_model_dir).with_name(Path(tiny_model_dir).name + "-hd64")
    with building(out):
        return _build_wide_copy(Path(tiny_model_dir), config, out)


def _build_wide_copy(tiny_model_dir: Path, config: dict, out: Path) -> Path:
    """The tiny Llama's config with head_dim 64, random fp32 weights, written to `out` through a staging folder."""
    if (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        **{
            **{k: v for k, v in config.items() if k in LlamaConfig().to_dict()},
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 64,
        }
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)  # left by a build that was killed
    model.save_pretrained(staging, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(staging)
    staging.rename(out)
    return out


@pytest.fixture(scope="session")
def rollout_config(serve_http_port):
    """A small-footprint RolloutConfig for tests: fp32 (so log-probs can be compared tightly), 1 GiB KV cache."""
    from support import cpu_rollout_config

    return cpu_rollout_config(
        dtype="float32",
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        prompt_length=64,
        response_length=8,
        cpu_kv_cache_gib=1.0,
        cpus_per_replica=1.0,
        replicas=1,
        http_port=serve_http_port,  # where the session's Serve proxy listens (tests/conftest.py)
    )


def reference_logprobs(model, prompt: list[int], response: list[int], temperature: float = 1.0):
    """log_softmax(logits / temperature) of each response token given everything before it; shape (len(response),)."""
    import torch

    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    steps = logits[len(prompt) - 1 : -1] / temperature  # position t predicts token t + 1
    return steps.log_softmax(-1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def reference_greedy(model, prompt: list[int], max_tokens: int) -> list[int]:
    import torch

    ids = list(prompt)
    with torch.no_grad():
        for _ in range(max_tokens):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.fixture(scope="session")
def reference():
    """Reference math (transformers) that vLLM's samples must equal: `.logprobs(...)`, `.greedy(...)`."""
    from types import SimpleNamespace

    return SimpleNamespace(logprobs=reference_logprobs, greedy=reference_greedy)
