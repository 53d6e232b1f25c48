"""FlexAttention packed attention (one call per layer, CUDA's path) against the per-sequence path (the CPU's).

FlexAttention runs forward-only on a CPU (torch refuses its backward there), so its outputs are compared here, in
fp32 and to rounding; for the gradients, the same mask_mod rendered dense (``create_mask``) drives sdpa, which shows
the mask gives the per-sequence gradients. The fused kernel's own backward is checked on CUDA by bench/gpu_check.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from packed_rows import CPU, DIM, HEADS, KV_HEADS, LAYOUT, LENGTHS, cu_of, per_sequence
from torch.nn.attention.flex_attention import create_mask

from app.engine import packed_attention
from app.engine.forward import response_outputs
from app.engine.packed_attention import (
    FLEX,
    flex_packed_attention,
    packed_mask_mod_for,
)


@pytest.fixture(autouse=True)
def _quiet_eager_flex():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def _qkv(total, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(1, h, total, DIM, generator=g, dtype=torch.float64).to(dtype) for h in (HEADS, KV_HEADS, KV_HEADS)
    ]


def _per_sequence(q, k, v, metadata):
    return per_sequence(q, k, v, metadata).transpose(1, 2)


def test_mask_by_hand():
    # plain: sequences [0, 2) and [2, 5), each causal, never across
    plain = create_mask(packed_mask_mod_for(cu_of([2, 3]), 5, CPU), None, None, 5, 5, device=CPU)[0, 0]
    assert plain.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    # shared: prompt p0 p1, response a0 (1 token), response b0 b1: each response sees the prompt and itself only
    shared = create_mask(packed_mask_mod_for(((2, (1, 2)),), 5, CPU), None, None, 5, 5, device=CPU)[0, 0]
    assert shared.int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 1, 0, 1, 1],
    ]


@pytest.mark.parametrize("metadata", [cu_of(LENGTHS), LAYOUT], ids=["plain", "shared_prompt"])
def test_flex_forward_equals_per_sequence_fp32(metadata):
    total = sum(LENGTHS) if isinstance(metadata, torch.Tensor) else sum(p + sum(r) for p, r in LAYOUT)
    q, k, v = _qkv(total, torch.float32)
    with torch.no_grad():
        want = _per_sequence(q, k, v, metadata)
        got = flex_packed_attention(q, k, v, metadata, None, compiled=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("metadata", [cu_of(LENGTHS), LAYOUT], ids=["plain", "shared_prompt"])
def test_flex_mask_gives_per_sequence_gradients(metadata):
    total = sum(LENGTHS) if isinstance(metadata, torch.Tensor) else sum(p + sum(r) for p, r in LAYOUT)
    dense = create_mask(packed_mask_mod_for(metadata, total, CPU), None, None, total, total, device=CPU)
    g = torch.Generator().manual_seed(1)
    grad_out = torch.randn(1, HEADS, total, DIM, generator=g, dtype=torch.float64)
    results = []
    for attend in (
        lambda q, k, v: _per_sequence(q, k, v, metadata),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=True),
    ):
        inputs = [t.requires_grad_() for t in _qkv(total, torch.float64)]
        out = attend(*inputs)
        out.backward(grad_out)
        results.append([out.detach()] + [t.grad for t in inputs])
    for want, got in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_block_mask_is_built_once_per_forward():
    metadata = cu_of(LENGTHS)
    first = packed_attention._block_masks.get(metadata, sum(LENGTHS), CPU)
    assert packed_attention._block_masks.get(metadata, sum(LENGTHS), CPU) is first  # every layer: the same
    assert packed_attention._block_masks.get(cu_of(LENGTHS), sum(LENGTHS), CPU) is not first  # the next forward
    total = sum(p + sum(r) for p, r in LAYOUT)
    shared = packed_attention._block_masks.get(LAYOUT, total, CPU)
    # a layout rebuilt by FSDP's input casting is equal, not identical: still the same mask
    assert packed_attention._block_masks.get(tuple((p, tuple(r)) for p, r in LAYOUT), total, CPU) is shared


@pytest.mark.parametrize("share_prompts", [False, True])
def test_model_log_probs_with_flex_equal_per_sequence(monkeypatch, tiny_llama_dir, make_rl_batch, share_prompts):
    """The whole packed forward of the tiny Llama (fp32) gives the same log-probs through either kernel."""
    from transformers import AutoModelForCausalLM

    from app.engine.packed_attention import register_packed_attention

    model = AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, dtype=torch.float32, attn_implementation=register_packed_attention()
    ).eval()
    batch = make_rl_batch([6, 6, 4, 4, 3], [5, 2, 4, 1, 3], seed=2)
    batch["input_ids"][1, :6] = batch["input_ids"][0, :6]  # rows 0 and 1 share a prompt (as a GRPO group does)
    batch["input_ids"][3, 2:6] = batch["input_ids"][2, 2:6]  # rows 2 and 3 too

    def log_probs():
        with torch.no_grad():
            return response_outputs(
                model, batch, model_kind="causal_lm", remove_padding=True, share_prompts=share_prompts
            )["log_probs"]

    want = log_probs()
    monkeypatch.setattr(packed_attention, "packed_attention_kernel", lambda device, dtype=None: FLEX)
    from torch.nn.attention.flex_attention import flex_attention

    calls = []

    def eager_flex(*args, **kwargs):  # eager on a CPU; counted, so the test knows the flex path ran
        calls.append(args[0].shape)
        return flex_attention(*args, **kwargs)

    monkeypatch.setattr(packed_attention, "_compiled_flex_attention", lambda: eager_flex)
    got = log_probs()
    assert len(calls) == model.config.num_hidden_layers  # one call per layer for the whole packed row
    assert (want != 0).sum() == int(batch["response_mask"].sum())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("share_prompts", [False, True])
def test_engine_builds_one_block_mask_per_forward(monkeypatch, tiny_llama_dir, make_rl_batch, share_prompts):
    """Through the FSDP engine (whose input casting rebuilds the layout tuple for every layer) the block mask is
    built once per forward, and the log-probs equal the per-sequence kernel's."""
    import torch.nn.attention.flex_attention as flex_module
    from support import engine_spec

    from app.engine import StepContext, make_engine

    engine = make_engine(
        "fsdp2",
        engine_spec(
            tiny_llama_dir,
            param_dtype="fp32",
            device="cpu",
            optim=None,
            use_remove_padding=True,
            share_prompt_prefix=share_prompts,
        ),
    )
    engine.init_model()
    batch = make_rl_batch([6, 6, 4], [5, 2, 4], seed=3)
    batch["input_ids"][1, :6] = batch["input_ids"][0, :6]  # rows 0 and 1 share a prompt

    def log_probs():
        with engine.eval_mode():
            return engine.forward_backward_step(batch, StepContext(), forward_only=True).outputs["log_probs"]

    want = log_probs()
    builds = []
    real_create = flex_module.create_block_mask
    monkeypatch.setattr(flex_module, "create_block_mask", lambda *a, **k: builds.append(1) or real_create(*a, **k))
    monkeypatch.setattr(packed_attention, "packed_attention_kernel", lambda device, dtype=None: FLEX)
    monkeypatch.setattr(packed_attention, "_compiled_flex_attention", lambda: flex_module.flex_attention)
    monkeypatch.setattr(packed_attention, "_block_masks", packed_attention._LastBlockMask())  # nothing cached
    got = log_probs()
    assert len(builds) == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
