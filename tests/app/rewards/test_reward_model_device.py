"""The reward model runs where the worker computes, in the compute dtype, loaded straight there."""

import pytest
import torch

from app.rewards import RewardModelScorer
from app.rewards.reward_model import compute_dtype_for


def _save_reward_model(out):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=1,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(out)  # fp32 on disk
    return str(out)


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory, smollm2_dir):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("rm_device")
    AutoTokenizer.from_pretrained(smollm2_dir).save_pretrained(out)
    return _save_reward_model(out)


def test_compute_dtype_follows_the_device(monkeypatch):
    import app.engine.precision as precision

    assert compute_dtype_for(torch.device("cuda", 0)) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert compute_dtype_for(torch.device("cpu")) == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert compute_dtype_for(torch.device("cpu")) == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, "bf16"])
def test_scorer_runs_in_the_dtype_it_is_given(rm_dir, dtype):
    low = RewardModelScorer(rm_dir, dtype=dtype, device="cpu")
    assert {p.dtype for p in low.model.parameters()} == {torch.bfloat16}  # loaded in bf16: no fp32 copy kept
    assert {p.device for p in low.model.parameters()} == {torch.device("cpu")} and low.device == torch.device("cpu")
    full = RewardModelScorer(rm_dir, dtype=torch.float32, device="cpu")
    assert {p.dtype for p in full.model.parameters()} == {torch.float32}
    sequences = [[5, 9, 12, 3], [7, 8]]
    # the same model in bf16: the scores agree to bf16 rounding (8 bits of mantissa) of small values
    assert low.score_token_ids(sequences) == pytest.approx(full.score_token_ids(sequences), abs=3e-2)


def test_scorer_defaults_to_the_devices_compute_dtype(rm_dir, monkeypatch):
    import app.engine.precision as precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert RewardModelScorer(rm_dir, device="cpu").dtype == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert RewardModelScorer(rm_dir, device="cpu").dtype == torch.float32
