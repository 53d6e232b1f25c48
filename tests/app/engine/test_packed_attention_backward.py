"""The CPU attention backward (flash forward, matmul backward) gives sdpa's gradients."""

import torch
import torch.nn.functional as F

from app.engine.packed_attention import _causal_attention, _FlashThenMathAttention


def _inputs(dtype, heads=6, kv_heads=2, length=11, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, h, length, dim, generator=g, dtype=torch.float64) for h in (heads, kv_heads, kv_heads))
    grad_out = torch.randn(1, heads, length, dim, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)], grad_out.to(dtype)


def _grads(fn, inputs, grad_out):
    out = fn(*inputs)
    out.backward(grad_out)
    return [out.detach()] + [t.grad for t in inputs]


def test_matmul_backward_equals_sdpa_autograd_in_float64():
    # float64 removes rounding: any slip in the softmax backward, the causal mask or the grouped-query sums
    # (3 query heads share each kv head here) shows up far above 1e-10
    (q, k, v), grad_out = _inputs(torch.float64)
    ref = _grads(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True),
        [t.detach().clone().requires_grad_() for t in (q, k, v)],
        grad_out,
    )
    got = _grads(lambda a, b, c: _FlashThenMathAttention.apply(a, b, c, 8**-0.5), [q, k, v], grad_out)
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10, msg=name)


def test_bf16_training_takes_the_matmul_backward_and_stays_at_bf16_accuracy():
    (q, k, v), grad_out = _inputs(torch.bfloat16, length=40)
    out = _causal_attention(q, k, v, None, 0.0)
    assert out.grad_fn is not None and "FlashThenMath" in type(out.grad_fn).__name__
    out.backward(grad_out)
    exact = _grads(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True),
        [t.detach().double().requires_grad_() for t in (q, k, v)],
        grad_out.double(),
    )
    for name, g, r in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), exact[1:]):
        # bf16 keeps 8 mantissa bits (relative step 2^-8 = 0.4%); a wrong gradient is off by O(1)
        rel = float((g.double() - r).norm() / r.norm())
        assert rel < 1e-2, (name, rel)


def test_inference_and_fp32_keep_the_fused_sdpa():
    (q, k, v), _ = _inputs(torch.bfloat16)
    with torch.no_grad():
        assert _causal_attention(q, k, v, None, 0.0).grad_fn is None
    (q, k, v), _ = _inputs(torch.float32)
    assert "FlashThenMath" not in type(_causal_attention(q, k, v, None, 0.0).grad_fn).__name__


def test_matmul_backward_with_a_prompt_mask_equals_sdpa_autograd_in_float64():
    # a response of 4 tokens after a shared prompt of 7: 4 queries, 11 keys, query j sees keys 0..7+j
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 6, 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, 11, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    grad_out = torch.randn(1, 6, 4, 8, generator=g, dtype=torch.float64)
    allowed = torch.ones(4, 11, dtype=torch.bool).tril_(7)
    assert allowed[0].tolist() == [True] * 8 + [False] * 3
    ref = _grads(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=allowed, enable_gqa=True),
        [t.detach().clone().requires_grad_() for t in (q, k, v)],
        grad_out,
    )
    got = _grads(lambda a, b, c: _FlashThenMathAttention.apply(a, b, c, 8**-0.5, allowed), [q, k, v], grad_out)
    for name, r, g_ in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g_, r, rtol=1e-10, atol=1e-10, msg=name)
