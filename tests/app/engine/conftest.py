"""Fixtures for engine tests: a tiny random Llama (vocab 1024, hidden 64, 2 layers) and RL-shaped batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

VOCAB = 1024


def _build_tiny_llama(out: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return _build_tiny_llama(tmp_path_factory.mktemp("tiny-llama-engine"))


def _rl_batch(prompt_lens, response_lens, prompt_width=None, response_width=None, seed=0):
    """Left-padded prompts and right-padded responses (pad id 0) with verl's keys."""
    from app.batch import TensorBatch

    b = len(prompt_lens)
    p = prompt_width or max(prompt_lens)
    r = response_width or max(response_lens)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (b, p + r), generator=g)
    mask = torch.zeros(b, p + r, dtype=torch.long)
    for i, (pl, rl) in enumerate(zip(prompt_lens, response_lens)):
        mask[i, p - pl : p + rl] = 1
    ids = ids * mask  # padding holds the pad id 0
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    return TensorBatch(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": position_ids,
            "responses": ids[:, p:].clone(),
            "response_mask": mask[:, p:].clone(),
        }
    )


@pytest.fixture(scope="session")
def make_rl_batch():
    return _rl_batch
