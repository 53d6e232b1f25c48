"""A prompt's responses attend as one padded batch: the same outputs and gradients as one call per response."""

import pytest
import torch
import torch.nn.functional as F

from app.engine.packed_attention import _response_block, _shared_prompt_attention

# two prompts: 5 tokens with responses of 3, 0 (empty) and 4 tokens; 2 tokens with one response of 1 token
LAYOUT = ((5, (3, 0, 4)), (2, (1,)))
HEADS, KV_HEADS, DIM = 6, 2, 8


def _inputs(dtype, seed=0):
    total = sum(p + sum(r) for p, r in LAYOUT)
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, h, total, DIM, generator=g, dtype=torch.float64) for h in (HEADS, KV_HEADS, KV_HEADS))
    grad_out = torch.randn(1, HEADS, total, DIM, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)], grad_out.to(dtype)


def _one_call_per_sequence(q, k, v):
    """The definition: every response sees its prompt's keys, then its own causally; sdpa per sequence."""
    outs, at = [], 0
    for prompt_len, responses in LAYOUT:
        p = slice(at, at + prompt_len)
        outs.append(F.scaled_dot_product_attention(q[:, :, p], k[:, :, p], v[:, :, p], is_causal=True, enable_gqa=True))
        at += prompt_len
        for length in responses:
            r = slice(at, at + length)
            keys = torch.cat([k[:, :, p], k[:, :, r]], dim=2)
            values = torch.cat([v[:, :, p], v[:, :, r]], dim=2)
            allowed = torch.ones(length, prompt_len + length, dtype=torch.bool).tril_(prompt_len)
            outs.append(F.scaled_dot_product_attention(q[:, :, r], keys, values, attn_mask=allowed, enable_gqa=True))
            at += length
    return torch.cat(outs, dim=2)


def _grads(fn, inputs, grad_out):
    out = fn(*inputs)
    out.backward(grad_out)
    return [out.detach()] + [t.grad for t in inputs]


def test_response_block_by_hand():
    gather, unpad, allowed = _response_block(2, (3, 0, 1), torch.device("cpu"))
    # packed responses: tokens 0..2 (first), none (second), token 3 (third); padding repeats a valid position
    assert gather.tolist() == [[0, 1, 2], [3, 3, 3], [3, 3, 3]]
    assert unpad.tolist() == [0, 1, 2, 6]  # rows of the flattened (3 x 3) batch that hold real tokens
    # the first response's token 1 sees both prompt keys and its own tokens 0 and 1
    assert allowed[0, 0, 1].tolist() == [True, True, True, True, False]
    # the third response has one token: its padded keys are never seen
    assert allowed[2, 0, 0].tolist() == [True, True, True, False, False]


def test_batched_responses_equal_one_call_per_response_in_float64():
    # float64 removes rounding: a response that sees a sibling, padding or too little of its prompt is off by O(1)
    (q, k, v), grad_out = _inputs(torch.float64)
    ref = _grads(_one_call_per_sequence, [t.detach().clone().requires_grad_() for t in (q, k, v)], grad_out)
    got = _grads(
        lambda a, b, c: torch.cat(_shared_prompt_attention(a, b, c, LAYOUT, None, 0.0), dim=2), [q, k, v], grad_out
    )
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10, msg=name)


def test_bf16_training_path_stays_at_bf16_accuracy():
    # bf16 with gradients takes the flash-forward / matmul-backward function with a batched mask
    (q, k, v), grad_out = _inputs(torch.bfloat16, seed=1)
    got = _grads(
        lambda a, b, c: torch.cat(_shared_prompt_attention(a, b, c, LAYOUT, None, 0.0), dim=2), [q, k, v], grad_out
    )
    exact = _grads(_one_call_per_sequence, [t.detach().double().requires_grad_() for t in (q, k, v)], grad_out.double())
    for name, g, r in zip(("out", "dq", "dk", "dv"), got, exact):
        rel = float((g.double() - r).norm() / r.norm())  # bf16's relative step is 2^-8; a wrong one is O(1)
        assert rel < 1e-2, (name, rel)


def test_layout_that_does_not_cover_the_row_is_refused():
    (q, k, v), _ = _inputs(torch.float64)
    with pytest.raises(ValueError, match="covers 12 tokens"):
        _shared_prompt_attention(q, k, v, ((5, (3, 4)),), None, 0.0)
