"""algos.policy_filtration: PF-PPO's weights of a sample's reward, and the resampled rows."""

import pytest
import torch

from algos.policy_filtration import WEIGHT_FLOOR, filtration_sample, filtration_weights

SCORES = torch.tensor([1.0, -2.0, 0.0, 1.0, 0.5])


@pytest.mark.parametrize(
    "method, expected",
    [
        # |s| ** 2: 1, 4, 0, 1, 0.25
        ("pow", [1.0, 4.0, 0.0, 1.0, 0.25]),
        # the highest (1.0, twice) and the lowest (-2.0) get 1, the rest 0
        ("max_min", [1.0, 1.0, 0.0, 1.0, 0.0]),
        # the highest 0.4, the rest 0.1
        ("max_random", [0.4, 0.1, 0.1, 0.4, 0.1]),
    ],
)
def test_weights_by_method_with_verls_floor(method, expected):
    weights = filtration_weights(SCORES, method, weight_pow=2.0)
    torch.testing.assert_close(weights, torch.tensor(expected, dtype=torch.float64) + WEIGHT_FLOOR)


def test_pow_takes_the_power_given():
    # |s| ** 1 for weight_pow 1
    torch.testing.assert_close(
        filtration_weights(SCORES, "pow", 1.0), torch.tensor([1.0, 2.0, 0.0, 1.0, 0.5], dtype=torch.float64) + 1e-8
    )


def test_rows_are_drawn_as_many_as_the_batch_in_proportion_to_the_weights():
    scores = torch.tensor([0.0, 1.0, 2.0])  # pow 2: weights 1e-8, 1, 4 -> row 0 almost never, row 2 four times row 1
    generator = torch.Generator().manual_seed(0)
    draws = torch.cat([filtration_sample(scores, "pow", 2.0, generator) for _ in range(4000)])
    assert draws.shape == (12000,) and draws.dtype == torch.long
    counts = torch.bincount(draws, minlength=3).double() / draws.numel()
    assert counts[0] == 0
    # 0.8 expected for row 2; 12000 draws put 4 standard errors (4 x 0.0037) at 0.015
    assert abs(counts[2] - 0.8) < 0.015, counts


def test_all_zero_weights_draw_uniformly_and_seeded_draws_repeat():
    scores = torch.zeros(4)  # pow: every weight is the floor
    draws = filtration_sample(scores, "pow", 2.0, torch.Generator().manual_seed(1))
    assert draws.shape == (4,) and bool(((draws >= 0) & (draws < 4)).all())
    again = filtration_sample(scores, "pow", 2.0, torch.Generator().manual_seed(1))
    assert torch.equal(draws, again)


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match=r"reweight_method must be one of \['max_min', 'max_random', 'pow'\]"):
        filtration_weights(SCORES, "median", 2.0)
