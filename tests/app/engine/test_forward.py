"""How many tokens of logits the log-prob and entropy passes take at a time (``app.engine.forward``)."""

import pytest
import torch

import app.engine.forward as forward
from app.batch import TensorBatch
from app.engine.forward import CPU_CHUNK_BYTES, GPU_CHUNK_TOKENS, logits_chunk_size


@pytest.mark.parametrize(
    "vocab, tokens",
    [
        (49152, 64),  # SmolLM2: 16 MiB / (4 B x 49152) = 85.3 -> 64, a 12 MiB float32 chunk
        (152064, 16),  # Qwen2.5: 27.6 -> 16
        (128, 32768),  # 16 MiB / 512 B = 32768 exactly, a power of two already
        (8 << 20, 1),  # a float32 row alone is over the budget: one token at a time
    ],
)
def test_cpu_chunks_are_the_largest_power_of_two_within_the_byte_budget(vocab, tokens):
    assert logits_chunk_size(vocab, torch.device("cpu")) == tokens
    if tokens > 1:
        assert tokens * 4 * vocab <= CPU_CHUNK_BYTES < 2 * tokens * 4 * vocab


def test_gpu_chunks_do_not_depend_on_the_vocabulary():
    assert (
        logits_chunk_size(49152, torch.device("cuda")) == logits_chunk_size(8, torch.device("cuda")) == GPU_CHUNK_TOKENS
    )


def test_an_unset_chunk_size_is_sized_from_the_logits_vocabulary(monkeypatch):
    seen = []

    def spy(logits, labels, chunk_size):
        seen.append(chunk_size)
        return torch.zeros(labels.shape)

    monkeypatch.setattr(forward, "log_probs_from_logits", spy)
    model = lambda **kwargs: type("Out", (), {"logits": torch.zeros(2, 4, 49152)})()  # noqa: E731
    ids = torch.ones(2, 4, dtype=torch.long)
    batch = TensorBatch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "responses": ids[:, 1:]})
    forward.response_outputs(model, batch, model_kind="causal_lm", remove_padding=False)
    forward.response_outputs(model, batch, model_kind="causal_lm", remove_padding=False, chunk_size=5)
    assert seen == [64, 5]
