"""Clipped value loss."""

import pytest
import torch

from algos.aggregation import loss_normalizer
from algos.value_loss import compute_value_loss


def test_value_loss_hand_computed():
    vpreds = torch.tensor([[1.0, 2.0, 50.0]], requires_grad=True)
    values = torch.tensor([[0.5, 2.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])  # the 50 is padding
    loss, metrics = compute_value_loss(vpreds, values, returns, mask, cliprange_value=0.2, loss_agg_mode="token-mean")
    # Token 0: unclipped (1-2)^2 = 1; clipped vpred = clamp(1, 0.3, 0.7) = 0.7 -> (0.7-2)^2 = 1.69; max = 1.69.
    # Token 1: vpred 2 is inside [1.8, 2.2], both errors (2-1)^2 = 1.
    # loss = 0.5 * token-mean(1.69, 1) = 0.6725.
    assert loss.item() == pytest.approx(0.6725, rel=1e-6)
    assert metrics["vf_clipfrac"].item() == 0.5 and metrics["vpred_mean"].item() == pytest.approx(1.5)
    loss.backward()
    # Token 0 uses the clipped branch, flat in vpred -> 0. Token 1: d/dv 0.5 * (v-1)^2 / 2 = (v-1)/2 = 0.5.
    assert vpreds.grad.tolist() == [[0.0, 0.5, 0.0]]


def test_no_clip_is_half_mse():
    vpreds = torch.tensor([[3.0, 1.0]])
    ones = torch.ones(1, 2)
    loss, metrics = compute_value_loss(
        vpreds, torch.zeros(1, 2), ones, ones, cliprange_value=None, loss_agg_mode="token-mean"
    )
    # 0.5 * mean((3-1)^2, (1-1)^2) = 0.5 * 2 = 1.
    assert loss.item() == 1.0 and metrics["vf_clipfrac"].item() == 0.0


def test_value_loss_micro_batches_sum_to_the_whole():
    torch.manual_seed(0)
    vpreds = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    values, returns = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    for mode in ("token-mean", "seq-mean-token-mean"):
        kw = dict(cliprange_value=0.3, loss_agg_mode=mode)
        (g_whole,) = torch.autograd.grad(compute_value_loss(vpreds, values, returns, mask, **kw)[0], vpreds)
        n = loss_normalizer(mask, mode)
        parts = [
            compute_value_loss(vpreds[s], values[s], returns[s], mask[s], normalizer=n, **kw)[0]
            for s in (slice(0, 2), slice(2, 5))
        ]
        (g_split,) = torch.autograd.grad(sum(parts), vpreds)
        assert torch.allclose(g_split, g_whole, rtol=1e-12, atol=1e-12)
