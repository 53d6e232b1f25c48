"""Chunked log-probs, entropy and full KL equal the unchunked reference, in value and gradient, for bf16 too."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.logprobs import (
    entropy_from_logits,
    full_kl_from_logits,
    log_probs_from_logits,
    sum_pi_squared_from_logits,
)

HYP = settings(max_examples=25, deadline=None)


def ref_log_probs(logits, labels):
    return torch.log_softmax(logits.float(), -1).gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)


def ref_entropy(logits):
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def ref_full_kl(logits, ref_logits):
    logp, logq = torch.log_softmax(logits.float(), -1), torch.log_softmax(ref_logits.float(), -1)
    return (logp.exp() * (logp - logq)).sum(-1)


def test_hand_computed_values():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # probabilities (1/4, 3/4)
    assert log_probs_from_logits(logits, torch.tensor([1])).item() == pytest.approx(math.log(0.75), rel=1e-6)
    expected_entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_from_logits(logits).item() == pytest.approx(expected_entropy, rel=1e-6)
    # Uniform logits: log-prob -ln V, entropy ln V.
    uniform = torch.zeros(2, 3, 5)
    first = torch.zeros(2, 3, dtype=torch.long)
    assert torch.allclose(log_probs_from_logits(uniform, first), torch.full((2, 3), -math.log(5)))
    assert torch.allclose(entropy_from_logits(uniform), torch.full((2, 3), math.log(5)))
    # sum of squared probabilities: (1/4)^2 + (3/4)^2 = 10/16; uniform over 5: 5 x (1/5)^2 = 1/5
    assert sum_pi_squared_from_logits(logits).item() == pytest.approx(10 / 16, rel=1e-6)
    assert torch.allclose(sum_pi_squared_from_logits(uniform), torch.full((2, 3), 0.2))


@st.composite
def logits_cases(draw):
    packed = draw(st.booleans())
    shape = (
        (draw(st.integers(1, 9)), draw(st.integers(2, 17)))
        if packed
        else (draw(st.integers(1, 3)), draw(st.integers(1, 7)), draw(st.integers(2, 17)))
    )
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    return shape, draw(st.integers(1, 8)), draw(st.integers(0, 2**16)), dtype


def _logits(case):
    """(shape, chunk size, the generator that drew them, logits of the case's dtype with a spread of 3)."""
    shape, chunk, seed, dtype = case
    gen = torch.Generator().manual_seed(seed)
    return shape, chunk, gen, (3 * torch.randn(shape, generator=gen)).to(dtype)


def _tol(dtype):
    # Both sides upcast the same bf16 numbers, so they agree to float32 rounding; gradients are rounded to bf16.
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)


@HYP
@given(case=logits_cases())
def test_chunked_log_probs_equal_reference(case):
    shape, chunk, gen, base = _logits(case)
    dtype = base.dtype
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    upstream = torch.randn(shape[:-1], generator=gen)
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    out, ref = log_probs_from_logits(a, labels, chunk_size=chunk), ref_log_probs(b, labels)
    assert out.dtype == torch.float32 and out.shape == shape[:-1]
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert a.grad.dtype == dtype and torch.allclose(a.grad.float(), b.grad.float(), **_tol(dtype))


@HYP
@given(case=logits_cases())
def test_chunked_entropy_equals_reference(case):
    shape, chunk, gen, base = _logits(case)
    dtype = base.dtype
    upstream = torch.randn(shape[:-1], generator=gen)
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    out, ref = entropy_from_logits(a, chunk_size=chunk), ref_entropy(b)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert torch.allclose(a.grad.float(), b.grad.float(), **_tol(dtype))


@HYP
@given(case=logits_cases())
def test_chunked_full_kl_equals_reference(case):
    shape, chunk, seed, dtype = case
    gen = torch.Generator().manual_seed(seed)
    z, w = (3 * torch.randn(shape, generator=gen)).to(dtype), (3 * torch.randn(shape, generator=gen)).to(dtype)
    upstream = torch.randn(shape[:-1], generator=gen)
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    wa, wb = w.clone().requires_grad_(), w.clone().requires_grad_()
    out, ref = full_kl_from_logits(a, wa, chunk_size=chunk), ref_full_kl(b, wb)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    (out * upstream).sum().backward()
    (ref * upstream).sum().backward()
    assert torch.allclose(a.grad.float(), b.grad.float(), **_tol(dtype))
    assert torch.allclose(wa.grad.float(), wb.grad.float(), **_tol(dtype))


def test_float64_gradcheck_including_non_contiguous_slice():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randn(2, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    labels = torch.randint(0, 5, (2, 4), generator=gen)
    # logits[:, :-1] cannot be viewed as (tokens, vocab): exercises the per-row chunk walk.
    shifted = lambda t: log_probs_from_logits(t[:, :-1], labels[:, 1:], chunk_size=3)  # noqa: E731
    assert torch.autograd.gradcheck(shifted, (x,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda t: entropy_from_logits(t[:, :-1], chunk_size=2), (x,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda s, t: full_kl_from_logits(s, t, chunk_size=4), (x, y), fast_mode=True)


def test_only_the_inputs_are_kept_for_backward():
    # The point of chunking: autograd must not hold a float32 (tokens, vocab) tensor between forward and backward.
    # saved_tensors_hooks sees every tensor autograd stores for backward during the forward.
    logits = torch.randn(4, 8, 100, dtype=torch.bfloat16, requires_grad=True)
    ref_logits = torch.randn(4, 8, 100, dtype=torch.bfloat16)
    labels = torch.randint(0, 100, (4, 8))
    calls = {
        "log_probs": lambda: log_probs_from_logits(logits, labels, 5),
        "entropy": lambda: entropy_from_logits(logits, 5),
        "full_kl": lambda: full_kl_from_logits(logits, ref_logits, 5),
    }
    for name, call in calls.items():
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            call()
        big = [t for t in saved if t.numel() >= logits.numel()]
        assert big and all(t.dtype == torch.bfloat16 for t in big), name
        assert {t.data_ptr() for t in big} <= {logits.data_ptr(), ref_logits.data_ptr()}, name
        # The reference implementation, by contrast, keeps float32 softmax-sized tensors.
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            ref_entropy(logits)
        assert any(t.dtype == torch.float32 and t.numel() >= logits.numel() for t in saved)


def test_works_without_grad_and_rejects_bad_shapes():
    logits = torch.randn(3, 4, 7)
    with torch.no_grad():
        assert log_probs_from_logits(logits, torch.zeros(3, 4, dtype=torch.long), chunk_size=2).shape == (3, 4)
    with pytest.raises(ValueError, match="labels shape"):
        log_probs_from_logits(logits, torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_from_logits(logits, chunk_size=0)


@HYP
@given(case=logits_cases())
def test_chunked_sum_pi_squared_equals_reference(case):
    shape, chunk, _, logits = _logits(case)
    out = sum_pi_squared_from_logits(logits, chunk_size=chunk)
    ref = (torch.softmax(logits.float(), -1) ** 2).sum(-1)
    assert out.dtype == torch.float32 and out.shape == shape[:-1] and not out.requires_grad
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
