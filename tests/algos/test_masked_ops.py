"""Masked reductions: hand-computed values and immunity to garbage in dropped positions."""

import math

import torch

from algos.masked import masked_mean, masked_sum, masked_var, masked_whiten

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, float("nan")]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])  # keeps 1, 2, 3, 4


def test_masked_sum_and_mean_ignore_dropped_entries_even_nan():
    assert masked_sum(VALUES, MASK).item() == 10.0  # 1 + 2 + 3 + 4
    assert masked_mean(VALUES, MASK).item() == 2.5
    # Row means: (1 + 2 + 3) / 3 and 4 / 1.
    assert masked_mean(VALUES, MASK, dim=-1).tolist() == [2.0, 4.0]


def test_masked_mean_of_nothing_is_zero_not_nan():
    assert masked_mean(VALUES, torch.zeros_like(MASK)).item() == 0.0


def test_masked_var_is_unbiased_sample_variance():
    # Kept 1, 2, 3, 4: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, / (4 - 1).
    assert math.isclose(masked_var(VALUES, MASK).item(), 5.0 / 3.0, rel_tol=1e-6)
    assert math.isclose(masked_var(VALUES, MASK, unbiased=False).item(), 5.0 / 4.0, rel_tol=1e-6)


def test_masked_whiten_standardises_kept_and_zeroes_dropped():
    out = masked_whiten(VALUES, MASK)
    std = math.sqrt(5.0 / 3.0)
    expected = [[(1 - 2.5) / std, (2 - 2.5) / std, (3 - 2.5) / std], [(4 - 2.5) / std, 0.0, 0.0]]
    assert torch.allclose(out, torch.tensor(expected), atol=1e-6)
    # shift_mean=False keeps the mean: whitened + 2.5 on kept entries.
    unshifted = masked_whiten(VALUES, MASK, shift_mean=False)
    assert torch.allclose(unshifted[MASK.bool()], out[MASK.bool()] + 2.5, atol=1e-6)


def test_masked_whiten_over_two_ranks_uses_the_whole_batchs_mean_and_variance():
    from two_ranks import on_two_ranks

    # Rank 0 keeps 1, 2 (its padding holds garbage), rank 1 keeps 3, 4, 5, 6: the whole batch's mean is 3.5 and its
    # unbiased variance (6.25 + 2.25 + 0.25 + 0.25 + 2.25 + 6.25) / 5 = 3.5, as masked_whiten of the undivided batch
    # gives; each rank whitening its own part would centre rank 0 on 1.5 and rank 1 on 4.5.
    part0 = {"values": torch.tensor([[1.0, 2.0, float("nan")]]), "mask": torch.tensor([[1, 1, 0]])}
    part1 = {"values": torch.tensor([[3.0, 4.0, 5.0], [6.0, 0.0, 0.0]]), "mask": torch.tensor([[1, 1, 1], [1, 0, 0]])}
    out0, out1 = on_two_ranks(masked_whiten, [part0, part1])
    std = math.sqrt(3.5)
    assert torch.allclose(out0, torch.tensor([[-2.5 / std, -1.5 / std, 0.0]]), atol=1e-6)
    assert torch.allclose(out1, torch.tensor([[-0.5 / std, 0.5 / std, 1.5 / std], [2.5 / std, 0.0, 0.0]]), atol=1e-6)
    whole = masked_whiten(torch.tensor([[1.0, 2, 3, 4, 5, 6]]), torch.ones(1, 6))
    assert torch.allclose(torch.cat([out0[0, :2], out1[0], out1[1, :1]]), whole[0], atol=1e-6)
