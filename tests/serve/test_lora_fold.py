"""The rollout-side LoRA fold (`serve.lora_fold`): the same merged weights as the trainer's merge, bit for bit, and a
mismatched adapter refused before anything is yielded. No Ray, no vLLM."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from app.engine.lora_merge import merge_lora_state_dict
from serve.lora_fold import adapter_pairs, checkpoint_files, fold, iter_folded, iter_folded_adapter, lora_scaling

PEFT = "base_model.model."
LINEARS = ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj")  # (out, in) = (8, 6), (6, 10)


def _base_and_adapter(rank: int = 4):
    """A base checkpoint (HF names: two LoRA-wrapped linears, an embedding, a norm, a tied lm_head) and a peft
    adapter for it, random."""
    torch.manual_seed(0)
    base = {
        "model.embed_tokens.weight": torch.randn(12, 6),
        "model.norm.weight": torch.randn(6),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 6),
        "model.layers.0.mlp.down_proj.weight": torch.randn(6, 10),
    }
    base["lm_head.weight"] = base["model.embed_tokens.weight"].clone()
    adapter = {}
    for module in LINEARS:
        out_features, in_features = base[f"{module}.weight"].shape
        adapter[f"{PEFT}{module}.lora_A.weight"] = torch.randn(rank, in_features)
        adapter[f"{PEFT}{module}.lora_B.weight"] = torch.randn(out_features, rank)
    return base, adapter


def _trainer_merge(base, adapter, scaling, dtype):
    """What `app.engine.lora_merge` produces on the trainer from the peft model's state dict."""
    state = {}
    for name, tensor in base.items():
        module = name.removesuffix(".weight")
        state[f"{PEFT}{module}.base_layer.weight" if module in LINEARS else f"{PEFT}{name}"] = tensor
    for name, tensor in adapter.items():
        state[name.replace(".weight", ".default.weight")] = tensor
    return merge_lora_state_dict(state, scaling=scaling, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fold_equals_the_trainers_merge_bit_for_bit(tmp_path, dtype):
    base, adapter = _base_and_adapter()
    save_file(base, str(tmp_path / "model.safetensors"))
    expected = _trainer_merge(base, adapter, scaling=2.0, dtype=dtype)

    folded = dict(iter_folded(checkpoint_files(str(tmp_path)), adapter, 2.0, dtype, skip={"lm_head.weight"}))

    assert set(folded) == set(base) - {"lm_head.weight"}
    for name, tensor in folded.items():
        assert tensor.dtype == dtype and torch.equal(tensor, expected[name]), name
    # the wrapped linears really moved (B @ A is not zero) and the others are the base, cast
    q = "model.layers.0.self_attn.q_proj.weight"
    assert (folded[q].float() - base[q]).abs().max() > 0.5
    assert torch.equal(folded["model.norm.weight"], base["model.norm.weight"].to(dtype))


def test_round_to_puts_the_folded_weight_on_that_grid_before_the_cast():
    """bf16 keeps 8 significant bits: next to 1.0 its values lie 2**-7 apart, so an update of 2**-9 (under half a
    step) is dropped and one of 3 * 2**-7 kept, where float32 keeps both. 1.5 * 2**-8 is a tie, which rounds to
    the even neighbour (1 + 2**-7)."""
    weight = torch.ones(1, 3)
    lora_a = torch.eye(3)  # r = 3: B @ A = B
    lora_b = torch.tensor([[2.0**-9, 3 * 2.0**-7, 1.5 * 2.0**-7]])

    exact = fold(weight, lora_a, lora_b, 1.0, torch.float32)
    rounded = fold(weight, lora_a, lora_b, 1.0, torch.float32, round_to=torch.bfloat16)

    assert exact.tolist() == [[1 + 2.0**-9, 1 + 3 * 2.0**-7, 1 + 1.5 * 2.0**-7]]
    assert rounded.dtype == torch.float32 and rounded.tolist() == [[1.0, 1 + 3 * 2.0**-7, 1 + 2 * 2.0**-7]]


def test_round_to_rounds_only_the_weights_the_adapter_wraps(tmp_path):
    base, adapter = _base_and_adapter()
    save_file(base, str(tmp_path / "model.safetensors"))
    exact = _trainer_merge(base, adapter, scaling=2.0, dtype=torch.float32)

    folded = dict(iter_folded(checkpoint_files(str(tmp_path)), adapter, 2.0, torch.float32, round_to=torch.bfloat16))

    for name, tensor in folded.items():
        wrapped = name.removesuffix(".weight") in LINEARS
        expected = exact[name].bfloat16().float() if wrapped else base[name]
        assert tensor.dtype == torch.float32 and torch.equal(tensor, expected), name
        assert torch.equal(tensor, exact[name]) != wrapped, name  # randn weights: rounding moves the wrapped ones


def test_adapter_folder_is_read_with_peft_scaling(tmp_path):
    base, adapter = _base_and_adapter(rank=4)
    save_file(base, str(tmp_path / "model.safetensors"))
    staged = tmp_path / "adapter"
    staged.mkdir()
    save_file(adapter, str(staged / "adapter_model.safetensors"))
    (staged / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8}))  # scaling 8 / 4 = 2

    folded = dict(iter_folded_adapter(str(tmp_path), str(staged), "float32"))

    q = "model.layers.0.self_attn.q_proj.weight"
    a, b = (
        adapter[f"{PEFT}model.layers.0.self_attn.q_proj.lora_A.weight"],
        adapter[f"{PEFT}model.layers.0.self_attn.q_proj.lora_B.weight"],
    )
    assert torch.equal(folded[q], base[q] + 2.0 * (b @ a))
    assert "lm_head.weight" in folded  # nothing skipped unless asked
    rounded = dict(iter_folded_adapter(str(tmp_path), str(staged), "float32", round_to="bfloat16"))
    assert torch.equal(rounded[q], (base[q] + 2.0 * (b @ a)).bfloat16().float())


def test_scaling_is_peft_s():
    assert lora_scaling({"r": 16, "lora_alpha": 32}) == 2.0
    assert lora_scaling({"r": 16, "lora_alpha": 32, "use_rslora": True}) == 8.0  # alpha / sqrt(r)


def test_a_mismatched_adapter_fails_before_anything_is_yielded(tmp_path):
    base, adapter = _base_and_adapter()
    save_file(base, str(tmp_path / "model.safetensors"))
    files = checkpoint_files(str(tmp_path))

    foreign = {k.replace("layers.0", "layers.7"): v for k, v in adapter.items()}
    with pytest.raises(KeyError, match=r"model\.layers\.7\..* does not hold"):
        next(iter_folded(files, foreign, 1.0, torch.float32))
    half = {k: v for k, v in adapter.items() if "q_proj.lora_B" not in k}
    with pytest.raises(KeyError, match="only lora_A for 'model.layers.0.self_attn.q_proj.weight'"):
        adapter_pairs(half)
    with pytest.raises(KeyError, match="'base_model.model.model.norm.weight' is not a peft LoRA weight"):
        adapter_pairs({**adapter, f"{PEFT}model.norm.weight": torch.ones(6)})
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors base weights"):
        iter_folded_adapter(str(tmp_path / "missing"), str(tmp_path), "float32")
    assert checkpoint_files(str(tmp_path / "missing")) == []
