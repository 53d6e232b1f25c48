"""The fused LoRA forward computes what peft computes, with the same gradients, and steps aside when it must."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from app.engine.lora_fast_path import use_fused_lora_forward


def _peft_model(seed=0, **lora):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = get_peft_model(
        LlamaForCausalLM(config).double(), LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", **lora)
    )
    for name, p in model.named_parameters():  # lora_B starts at zero; make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    return model


def _loss_and_grads(model, ids):
    model.zero_grad()
    logits = model(input_ids=ids).logits
    logits.square().mean().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_fused_forward_matches_peft_outputs_and_gradients():
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    reference, fused = _peft_model(), _peft_model()
    # 2 layers x 7 linear modules (q, k, v, o, gate, up, down); the LM head is not a target of all-linear
    assert use_fused_lora_forward(fused) == 14
    ref_logits, ref_grads = _loss_and_grads(reference, ids)
    got_logits, got_grads = _loss_and_grads(fused, ids)
    # float64: only the order of additions differs, so 1e-12 is far tighter than any real difference (the
    # adapter contributes O(1) to the logits: leaving it out, or scaling it twice, would be off by >1e-2)
    torch.testing.assert_close(got_logits, ref_logits, rtol=1e-12, atol=1e-12)
    assert ref_grads.keys() == got_grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(got_grads[name], ref_grads[name], rtol=1e-10, atol=1e-12, msg=name)
    with reference.disable_adapter():
        base_logits = reference(input_ids=ids).logits
    assert (base_logits - ref_logits).abs().max() > 1e-2


def test_disabled_adapter_gives_the_base_model():
    ids = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(2))
    model = _peft_model()
    with model.disable_adapter(), torch.no_grad():
        base = model(input_ids=ids).logits
    use_fused_lora_forward(model)
    with model.disable_adapter(), torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, base, rtol=0, atol=0)


@pytest.mark.parametrize("lora", [dict(lora_dropout=0.1), dict(use_dora=True)])
def test_dropout_and_dora_layers_keep_peft_forward(lora):
    assert use_fused_lora_forward(_peft_model(**lora)) == 0


def test_mixed_dtypes_fall_back_to_peft():
    # bf16 base with fp32 adapters (peft's default outside FSDP): only peft's own forward casts between them
    def mixed():
        model = _peft_model().to(torch.bfloat16)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.data = p.data.float()
        return model

    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(3))
    reference, fused = mixed(), mixed()
    assert use_fused_lora_forward(fused) == 14
    with torch.no_grad():
        torch.testing.assert_close(fused(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=0)
