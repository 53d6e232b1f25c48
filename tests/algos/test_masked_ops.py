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
