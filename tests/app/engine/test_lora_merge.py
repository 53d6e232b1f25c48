"""Folding LoRA into base weights gives exactly what peft's merge_and_unload gives."""

import torch

from app.engine.lora_merge import merge_lora_state_dict


def test_merge_equals_peft_merge_and_unload(tiny_model_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")
    )
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:  # B starts at zero; give the adapter something to add
            torch.nn.init.normal_(param, std=0.1)
    merged = merge_lora_state_dict(peft_model.state_dict(), scaling=8 / 4)
    expected = peft_model.merge_and_unload().state_dict()
    assert sorted(merged) == sorted(expected)  # plain HF names, no lora_A/lora_B/base_layer left
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[q], AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()[q])
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-6)


def test_untouched_tensors_are_only_renamed():
    embed = torch.randn(3, 2)
    merged = merge_lora_state_dict({"base_model.model.model.embed_tokens.weight": embed}, scaling=2.0)
    assert merged == {"model.embed_tokens.weight": embed}
