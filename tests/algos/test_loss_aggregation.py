"""loss_agg_mode: hand-computed values, global normalizers, and micro-batch invariance of the gradient."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.aggregation import LOSS_AGG_MODES, agg_loss, loss_normalizer

HYP = settings(max_examples=30, deadline=None)

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 is entirely masked


@pytest.mark.parametrize(
    "mode, expected, normalizer",
    [
        ("token-mean", (1 + 2 + 4) / 3, 3.0),  # kept tokens 1, 2, 4
        ("seq-mean-token-sum", ((1 + 2) + 4) / 2, 2.0),  # row sums 3 and 4; the empty row is not a sequence
        ("seq-mean-token-mean", (1.5 + 4) / 2, 2.0),  # row means 1.5 and 4
        ("seq-mean-token-sum-norm", (3 + 4) / (3 * 3), 9.0),  # constant: 3 rows x response_len 3
    ],
)
def test_agg_loss_hand_computed(mode, expected, normalizer):
    assert loss_normalizer(MASK, mode) == normalizer
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected, rel=1e-6)
    assert agg_loss(LOSS, MASK, mode, normalizer).item() == pytest.approx(expected, rel=1e-6)


def test_seq_mean_token_sum_norm_uses_loss_scale_factor():
    # 3 rows x factor 7 = 21; kept sum 7.
    assert loss_normalizer(MASK, "seq-mean-token-sum-norm", loss_scale_factor=7) == 21.0
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7).item() == pytest.approx(7 / 21)


def test_nothing_kept_gives_zero_not_nan():
    for mode in LOSS_AGG_MODES:
        assert agg_loss(LOSS, torch.zeros_like(MASK), mode).item() == 0.0


def test_unknown_mode_names_the_config_key():
    with pytest.raises(ValueError, match=r"actor\.loss_agg_mode='token-sum'.*seq-mean-token-mean"):
        agg_loss(LOSS, MASK, "token-sum")
    with pytest.raises(ValueError, match="actor.loss_agg_mode"):
        loss_normalizer(MASK, "mean")


def test_per_micro_batch_normalisation_would_be_wrong():
    # Guards the design: token-mean over micro-batches {row 0} and {row 1} with their own token counts gives
    # (1+2)/2 + 4/1 = 5.5, not the mini-batch mean 7/3. With the global normalizer the sum is right.
    rows = [LOSS[:1], LOSS[1:2]]
    masks = [MASK[:1], MASK[1:2]]
    naive = sum(agg_loss(loss, m, "token-mean") for loss, m in zip(rows, masks))
    assert naive.item() == pytest.approx(5.5)
    n = loss_normalizer(MASK, "token-mean")
    assert sum(agg_loss(loss, m, "token-mean", n) for loss, m in zip(rows, masks)).item() == pytest.approx(7 / 3)


@st.composite
def minibatches(draw):
    batch = draw(st.integers(1, 8))
    length = draw(st.integers(1, 6))
    lengths = [draw(st.integers(0, length)) for _ in range(batch)]  # 0 = fully masked row
    mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).double()
    seed = draw(st.integers(0, 2**16))
    cuts = sorted(draw(st.sets(st.integers(1, batch - 1), max_size=batch - 1))) if batch > 1 else []
    return mask, seed, [0, *cuts, batch]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@HYP
@given(case=minibatches())
def test_micro_batch_split_gives_the_same_gradient(mode, case):
    mask, seed, bounds = case
    gen = torch.Generator().manual_seed(seed)
    params = torch.randn(mask.shape, dtype=torch.float64, generator=gen, requires_grad=True)
    coeff = torch.randn(mask.shape, dtype=torch.float64, generator=gen)

    def loss_mat(rows):  # nonlinear, so the gradient depends on every weight
        p = params[rows]
        return coeff[rows] * p + 0.5 * p**2

    whole = agg_loss(loss_mat(slice(None)), mask, mode)
    (g_whole,) = torch.autograd.grad(whole, params)

    normalizer = loss_normalizer(mask, mode)
    total = torch.zeros((), dtype=torch.float64)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        total = total + agg_loss(loss_mat(slice(lo, hi)), mask[lo:hi], mode, normalizer)
    (g_split,) = torch.autograd.grad(total, params)

    assert torch.allclose(total, whole, rtol=1e-12, atol=1e-12)
    assert torch.allclose(g_split, g_whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@HYP
@given(case=minibatches(), extra=st.integers(1, 3), garbage=st.floats(-1e6, 1e6))
def test_padding_never_changes_the_loss(mode, case, extra, garbage):
    mask, seed, _ = case
    loss = torch.randn(mask.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    padded_loss = torch.cat([loss, torch.full((mask.shape[0], extra), garbage, dtype=torch.float64)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(mask.shape[0], extra, dtype=torch.float64)], dim=1)
    # seq-mean-token-sum-norm divides by a constant; fix it so a wider padded tensor does not change it.
    kw = {"loss_scale_factor": 10} if mode == "seq-mean-token-sum-norm" else {}
    a = agg_loss(loss, mask, mode, **kw)
    b = agg_loss(padded_loss, padded_mask, mode, **kw)
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)
