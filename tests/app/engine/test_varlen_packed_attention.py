"""The varlen packed attention (one ``varlen_attn`` call per layer, CUDA's path) against the per-sequence path.

PyTorch's varlen kernel runs on CUDA only, so here a reference with the kernel's contract stands in for it
(per segment: queries ``cu_q[i]:cu_q[i+1]`` against keys ``cu_k[i]:cu_k[i+1]``, causal aligned bottom-right, as
flash-attention aligns a segment with more keys than queries). What these tests check is our side: the segments,
key gather and arguments built from the packing metadata, and the adapter to each torch version's signature. The
kernel itself is checked against an fp64 reference on a GPU by ``bench/gpu_check.py attention``.
"""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
import torch.nn.functional as F
from packed_rows import CPU, DIM, HEADS, KV_HEADS, LAYOUT, LENGTHS, EvalLayer, cu_of, per_sequence, total_tokens

from app.engine import packed_attention
from app.engine.forward import response_outputs
from app.engine.packed_attention import (
    PER_SEQUENCE,
    VARLEN,
    packed_attention_kernel,
    packed_sdpa_attention,
    torch_varlen_causal,
    varlen_args_for_layout,
    varlen_packed_attention,
)


def reference_varlen_causal(q, k, v, cu_q, cu_k, max_q, max_k, scale):
    """The kernel's contract, one segment at a time: query i of a segment with Lq queries and Lk keys sees keys
    0..i + (Lk - Lq)."""
    assert cu_q.dtype == cu_k.dtype == torch.int32 and len(cu_q) == len(cu_k)
    outs = []
    for i in range(len(cu_q) - 1):
        qs, ks, vs = q[cu_q[i] : cu_q[i + 1]], k[cu_k[i] : cu_k[i + 1]], v[cu_k[i] : cu_k[i + 1]]
        assert len(qs) <= max_q and len(ks) <= max_k
        allowed = torch.ones(len(qs), len(ks), dtype=torch.bool).tril(len(ks) - len(qs))
        out = F.scaled_dot_product_attention(
            *(x.transpose(0, 1)[None] for x in (qs, ks, vs)), attn_mask=allowed, scale=scale, enable_gqa=True
        )
        outs.append(out[0].transpose(0, 1))
    return torch.cat(outs)


def _outputs_and_grads(attend, metadata):
    g = torch.Generator().manual_seed(0)
    total = total_tokens(metadata)
    inputs = [
        torch.randn(1, h, total, DIM, generator=g, dtype=torch.float64).requires_grad_()
        for h in (HEADS, KV_HEADS, KV_HEADS)
    ]
    grad_out = torch.randn(1, total, HEADS, DIM, generator=g, dtype=torch.float64)
    out = attend(*inputs)
    out.backward(grad_out)
    return [out.detach()] + [t.grad for t in inputs]


def test_kernel_choice_per_device(monkeypatch):
    assert packed_attention_kernel(CPU) == PER_SEQUENCE  # no fused kernel has a CPU backward
    cuda = torch.device("cuda", 0)
    monkeypatch.setitem(packed_attention._flash_capable_gpus, 0, True)  # as an Ampere or newer GPU answers
    monkeypatch.setattr(packed_attention, "varlen_kernel_available", lambda: True)
    assert packed_attention_kernel(cuda, torch.bfloat16) == packed_attention_kernel(cuda, torch.float16) == VARLEN
    assert packed_attention_kernel(cuda, torch.float32) == PER_SEQUENCE  # the flash kernel is half precision only
    monkeypatch.setitem(packed_attention._flash_capable_gpus, 0, False)  # a V100 or T4 (compute capability < 8.0)
    assert packed_attention_kernel(cuda) == PER_SEQUENCE
    monkeypatch.setitem(packed_attention._flash_capable_gpus, 0, True)
    monkeypatch.setattr(packed_attention, "varlen_kernel_available", lambda: False)  # torch before 2.9
    assert packed_attention_kernel(cuda) == PER_SEQUENCE


def test_layout_arguments_by_hand():
    # prompt p0 p1 (packed 0-1), response a (2), response b (3-4): a's keys are p0 p1 a, b's p0 p1 b0 b1
    args = varlen_args_for_layout(((2, (1, 2)),), CPU)
    assert args.cu_q.tolist() == [0, 2, 3, 5] and args.cu_k.tolist() == [0, 2, 5, 9]
    assert args.key_index.tolist() == [0, 1, 0, 1, 2, 0, 1, 3, 4]
    assert (args.max_q, args.max_k) == (2, 4) and args.cu_q.dtype == args.cu_k.dtype == torch.int32
    # an empty response adds no segment; the next prompt starts right after the last response
    args = varlen_args_for_layout(((1, (0, 1)), (1, (1,))), CPU)
    assert args.cu_q.tolist() == [0, 1, 2, 3, 4] and args.key_index.tolist() == [0, 0, 1, 2, 2, 3]


@pytest.mark.parametrize("metadata", [cu_of(LENGTHS), LAYOUT], ids=["plain", "shared_prompt"])
def test_varlen_equals_per_sequence_outputs_and_gradients(metadata):
    want = _outputs_and_grads(lambda q, k, v: per_sequence(q, k, v, metadata), metadata)
    got = _outputs_and_grads(
        lambda q, k, v: varlen_packed_attention(q, k, v, metadata, None, attend=reference_varlen_causal), metadata
    )
    for g, w in zip(got, want):  # fp64: the same sums in another order
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_packed_forward_takes_the_varlen_kernel_once_per_layer(monkeypatch, tiny_llama_dir, make_rl_batch):
    """The whole packed forward of the tiny Llama (fp32), plain and shared-prompt packing, through the varlen path
    gives the per-sequence path's log-probs, with one kernel call per layer."""
    from transformers import AutoModelForCausalLM

    from app.engine.packed_attention import register_packed_attention

    model = AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, dtype=torch.float32, attn_implementation=register_packed_attention()
    ).eval()
    batch = make_rl_batch([6, 6, 4, 4, 3], [5, 2, 4, 1, 3], seed=2)
    batch["input_ids"][1, :6] = batch["input_ids"][0, :6]  # rows 0 and 1 share a prompt (as a GRPO group does)

    def log_probs(share_prompts):
        with torch.no_grad():
            return response_outputs(
                model, batch, model_kind="causal_lm", remove_padding=True, share_prompts=share_prompts
            )["log_probs"]

    want = log_probs(False)
    calls = []

    def counted(q, k, v, cu_q, cu_k, max_q, max_k, scale):
        calls.append(int(max_q))
        return reference_varlen_causal(q, k, v, cu_q, cu_k, max_q, max_k, scale)

    monkeypatch.setattr(packed_attention, "packed_attention_kernel", lambda device, dtype=None: VARLEN)
    monkeypatch.setattr(packed_attention, "torch_varlen_causal", counted)
    for share_prompts in (False, True):
        calls.clear()
        got = log_probs(share_prompts)
        assert len(calls) == model.config.num_hidden_layers
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (want != 0).sum() == int(batch["response_mask"].sum())


def _install_fake_varlen(monkeypatch, signature_of):
    """``torch.nn.attention.varlen.varlen_attn`` replaced by a recorder with the signature of ``signature_of``,
    computing the reference."""
    import torch.nn.attention.varlen as varlen_module

    seen = {}

    def fake(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs):
        seen.update(kwargs, key_heads=key.shape[1])
        return reference_varlen_causal(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, kwargs.get("scale"))

    monkeypatch.setattr(varlen_module, "varlen_attn", fake)
    monkeypatch.setattr(packed_attention, "_VARLEN_PARAMETERS", frozenset(inspect.signature(signature_of).parameters))
    return seen


def _torch_2_9(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None): ...


def _torch_2_13(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1),
    enable_gqa=False,
): ...  # fmt: skip


@pytest.mark.parametrize("version", [_torch_2_9, _torch_2_13], ids=["is_causal", "window_size"])
@pytest.mark.parametrize("scale", [None, 0.5])
def test_adapter_speaks_each_torch_signature(monkeypatch, version, scale):
    seen = _install_fake_varlen(monkeypatch, version)
    g = torch.Generator().manual_seed(3)
    cu = cu_of(LENGTHS)
    q, k, v = (torch.randn(sum(LENGTHS), h, DIM, generator=g, dtype=torch.float64) for h in (HEADS, KV_HEADS, KV_HEADS))
    got = torch_varlen_causal(q, k, v, cu, cu, max(LENGTHS), max(LENGTHS), scale)
    want = reference_varlen_causal(q, k, v, cu, cu, max(LENGTHS), max(LENGTHS), scale)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    if version is _torch_2_9:  # causal by flag; no GQA or scale argument: heads repeated, the scale folded into q
        assert seen["is_causal"] is True and seen["key_heads"] == HEADS and "scale" not in seen
    else:
        assert seen["window_size"] == (-1, 0) and seen["enable_gqa"] and seen["key_heads"] == KV_HEADS
        assert seen.get("scale") == scale


@torch.library.custom_op("rayrl_test::stand_in_varlen", mutates_args=())
def _stand_in_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return q.clone()


@_stand_in_varlen.register_fake
def _(q, k, v):
    return torch.empty_like(q)


@pytest.mark.parametrize("max_length_q", [max(LENGTHS), None], ids=["from_packing", "read_from_cu"])
def test_a_compiled_layer_traces_the_varlen_call_without_a_graph_break(monkeypatch, max_length_q):
    """actor.use_torch_compile compiles each decoder layer: the varlen path must add no graph break there. The kernel
    choice and the signature adapter are constants to dynamo, and the longest sequence comes from the packing
    (``max_length_q``); reading it from ``cu_seq_lens`` on the device would break the graph."""
    import torch.nn.attention.varlen as varlen_module

    monkeypatch.setattr(varlen_module, "varlen_attn", lambda q, k, v, *args, **kwargs: _stand_in_varlen(q, k, v))
    monkeypatch.setattr(packed_attention, "_VARLEN_PARAMETERS", frozenset(inspect.signature(_torch_2_13).parameters))
    monkeypatch.setattr(packed_attention, "packed_attention_kernel", lambda device, dtype=None: VARLEN)
    cu = cu_of(LENGTHS)
    extra = {} if max_length_q is None else {"max_length_q": max_length_q}

    def layer_attention(q, k, v):
        return packed_sdpa_attention(EvalLayer(), q, k, v, None, cu_seq_lens_q=cu, **extra)[0]

    q, k, v = (torch.randn(1, h, sum(LENGTHS), DIM) for h in (HEADS, KV_HEADS, KV_HEADS))
    explained = torch._dynamo.explain(layer_attention)(q, k, v)
    if max_length_q is None:  # the test can tell: a device read breaks the graph
        assert explained.graph_break_count > 0
    else:
        assert explained.graph_break_count == 0, explained.break_reasons


def test_the_gpu_is_asked_its_capability_once_when_the_model_is_built(monkeypatch):
    """The compute capability is read when the engine picks the attention implementation (outside compiled layers)
    and remembered per GPU; a pre-Ampere GPU keeps the per-sequence path."""
    from app.engine import hf_model

    asked = []
    capabilities = {0: (9, 0), 1: (7, 5)}  # an H100/H200, a T4
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or capabilities[index])
    monkeypatch.setattr(packed_attention, "_flash_capable_gpus", {})
    monkeypatch.setattr(packed_attention, "varlen_kernel_available", lambda: True)
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # the flash-attn package is not installed
    for index in (0, 1):
        assert hf_model.attention_implementation(torch.device("cuda", index)) == packed_attention.PACKED_SDPA
    assert asked == [0, 1] and packed_attention._flash_capable_gpus == {0: True, 1: False}
    assert packed_attention_kernel(torch.device("cuda", 0)) == VARLEN
    assert packed_attention_kernel(torch.device("cuda", 1)) == PER_SEQUENCE
    assert asked == [0, 1]  # remembered: no further question to the GPU
