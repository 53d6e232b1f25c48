"""Advantage estimators: hand-computed cases and properties (padding, group statistics, identical rewards)."""

import math
import statistics

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from algos.advantages import (
    ADV_ESTIMATORS,
    compute_advantages,
    gae,
    gpg,
    grpo,
    grpo_batch_std,
    opo,
    optimal_token_baseline,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    remax,
    rloo,
)

HYP = settings(max_examples=40, deadline=None)
GROUP_ESTIMATORS = ("grpo", "grpo_batch_std", "rloo", "opo", "reinforce_plus_plus_baseline", "gpg")


def whiten_list(xs):
    mean, std = statistics.fmean(xs), statistics.stdev(xs)
    return [(x - mean) / math.sqrt(std**2 + 1e-8) for x in xs]


# ---------------------------------------------------------------- hand-computed cases


def test_gae_hand_computed():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.5]])
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    # Backwards: d2 = 1 - 0.5 = 0.5, A2 = 0.5
    #            d1 = 0 + 0.9*0.5 - 0.25 = 0.2, A1 = 0.2 + 0.72*0.5 = 0.56
    #            d0 = 0 + 0.9*0.25 - 0.5 = -0.275, A0 = -0.275 + 0.72*0.56 = 0.1282
    raw = [0.1282, 0.56, 0.5]
    assert torch.allclose(ret, torch.tensor([[0.1282 + 0.5, 0.56 + 0.25, 0.5 + 0.5]]), atol=1e-6)
    # The advantages handed to the policy are whitened over the batch's kept tokens (verl).
    assert torch.allclose(adv, torch.tensor([whiten_list(raw)]), atol=1e-5)


def test_gae_skips_masked_token_inside_response():
    # An observation token (mask 0) between two response tokens must not advance the recursion: the result on the
    # kept tokens equals the same response without it, whatever reward/value the masked slot holds.
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 7.0, 0.0]])
    values = torch.tensor([[0.5, 0.25, 0.5], [0.3, -9.0, 0.1]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1]])
    _, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # Row 1 is effectively [r=0, r=0] with values [0.3, 0.1]: d1 = 0 - 0.1, A1 = -0.1; d0 = 0.9*0.1 - 0.3 = -0.21,
    # A0 = -0.21 + 0.72*(-0.1) = -0.282; returns A + V = [0.018, -, 0.0].
    assert torch.allclose(ret[1], torch.tensor([0.018, 0.0, 0.0]), atol=1e-6)


def test_grpo_hand_computed_with_and_without_std():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.5, 0.5], [2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 0]])
    index = ["a", "a", "a", "a", "solo"]
    # Group a scores 1, 0, 0, 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735.
    adv, ret = grpo(rewards, mask, index)
    z = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    # The single-response group uses mean 0, std 1: advantage = score / (1 + eps).
    expected = torch.tensor([[z, z], [-z, -z], [-z, 0.0], [z, z], [2.0 / (1 + 1e-6), 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6) and torch.equal(adv, ret)
    # Dr. GRPO: only the mean is removed.
    adv_dr, _ = grpo(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert torch.allclose(adv_dr, torch.tensor([[0.5, 0.5], [-0.5, -0.5], [-0.5, 0], [0.5, 0.5], [2, 0]]), atol=1e-7)


def test_rloo_hand_computed():
    rewards = torch.tensor([[1.0], [2.0], [3.0], [5.0]])
    adv, _ = rloo(rewards, torch.ones(4, 1), index=[0, 0, 0, 1])
    # Leave-one-out baselines: 1 vs mean(2, 3) = 2.5; 2 vs 2; 3 vs 1.5. Single response: no baseline.
    assert adv.flatten().tolist() == pytest.approx([-1.5, 0.0, 1.5, 5.0], abs=1e-6)


def test_opo_hand_computed():
    rewards = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv, _ = opo(rewards, mask, index=["p", "p"])
    # Length-weighted baseline (3*0 + 1*1) / (3 + 1) = 0.25.
    assert torch.allclose(adv, torch.tensor([[-0.25, -0.25, -0.25], [0.75, 0.0, 0.0]]))


def test_reinforce_plus_plus_hand_computed():
    adv, ret = reinforce_plus_plus(torch.tensor([[1.0, 0.0, 2.0]]), torch.ones(1, 3), gamma=0.5)
    # G2 = 2, G1 = 0 + 0.5*2 = 1, G0 = 1 + 0.5*1 = 1.5. Whitened: mean 1.5, unbiased std 0.5.
    assert ret.tolist() == [[1.5, 1.0, 2.0]]
    assert torch.allclose(adv, torch.tensor([[0.0, -1.0, 1.0]]), atol=1e-6)


def test_reinforce_plus_plus_baseline_hand_computed():
    rewards = torch.tensor([[1.0, 0.0], [3.0, 0.0]])
    mask = torch.tensor([[1, 0], [1, 1]])
    adv, _ = reinforce_plus_plus_baseline(rewards, mask, index=[7, 7])
    # Group mean 2 -> per-token values -1 (row 0, 1 token) and +1, +1 (row 1, 2 tokens); whitening over these 3
    # tokens: mean 1/3, unbiased var ((4/3)^2 + 2*(2/3)^2) / 2 = 4/3.
    s = math.sqrt(4 / 3)
    assert torch.allclose(adv, torch.tensor([[(-4 / 3) / s, 0.0], [(2 / 3) / s, (2 / 3) / s]]), atol=1e-6)


@pytest.mark.parametrize(
    "name", ["gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gpg", "grpo_batch_std"]
)
def test_batch_statistics_over_two_ranks_are_the_undivided_batchs(name):
    from two_ranks import on_two_ranks

    # Four responses of two prompts, split over two ranks a group each (as the trainer splits them), rank 1's rows
    # padded wider. Each rank's advantages must be those of the undivided batch: verl computes them on its driver.
    # A rank that whitened (or, for gpg, counted) its own part alone gets others: checked last, so the test can fail.
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    values = torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.4, 0.0], [0.5, 0.0, 0.0], [0.2, 0.3, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    index = ["a", "a", "b", "b"]
    inputs = {"token_level_rewards": rewards, "response_mask": mask, "values": values, "index": index, "gamma": 0.9}
    whole, _ = compute_advantages(name, **inputs)

    def part(rows, width):
        sliced = {k: v[rows, :width] for k, v in inputs.items() if torch.is_tensor(v)}
        return {**inputs, **sliced, "index": index[rows]}

    def estimate(batch_sum, **part_inputs):
        return compute_advantages(name, **part_inputs, batch_sum=batch_sum)[0]

    parts = [part(slice(0, 2), 3), part(slice(2, 4), 2)]
    rank0, rank1 = on_two_ranks(estimate, parts)
    assert torch.allclose(rank0, whole[:2], atol=1e-6) and torch.allclose(rank1, whole[2:, :2], atol=1e-6)
    alone = compute_advantages(name, **parts[0])[0]
    assert not torch.allclose(alone, whole[:2], atol=1e-3)


def test_remax_hand_computed():
    adv, ret = remax(torch.tensor([[0.0, 1.0, 2.0, 9.0]]), torch.tensor([1.5]), torch.tensor([[1, 1, 1, 0]]))
    # Reward-to-go over kept tokens [3, 3, 2] (the 9 is padding), minus the greedy baseline 1.5.
    assert ret.tolist() == [[3.0, 3.0, 2.0, 0.0]] and adv.tolist() == [[1.5, 1.5, 0.5, 0.0]]


def test_gpg_hand_computed():
    rewards = torch.tensor([[1.0], [0.0], [0.0], [0.0], [3.0]])
    index = [0, 0, 1, 1, 2]
    adv, ret = gpg(rewards, torch.ones(5, 1), index=index)
    # 2 of the 5 responses score: alpha = 5 / 2. Group 0: mean 0.5 -> +-0.5 * 2.5; group 1 alike -> 0; the single
    # response of group 2 has no baseline: 3 * 2.5
    assert adv.flatten().tolist() == pytest.approx([1.25, -1.25, 0.0, 0.0, 7.5], abs=1e-6)
    assert torch.equal(adv, ret)
    # counts of the whole batch set alpha: another rank's 3 responses, none scored, make it 8 / 2 = 4
    adv, _ = gpg(rewards, torch.ones(5, 1), index=index, batch_sum=lambda counts: counts + torch.tensor([3.0, 0.0]))
    assert adv.flatten().tolist() == pytest.approx([2.0, -2.0, 0.0, 0.0, 12.0], abs=1e-6)
    # nothing scores: alpha is the batch size over 1 and every advantage 0 (no division by zero)
    assert not gpg(torch.zeros(4, 1), torch.ones(4, 1), index=[0, 0, 1, 1])[0].any()


def test_grpo_batch_std_hand_computed():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
    mask = torch.tensor([[1, 0], [1, 1], [1, 0], [1, 1], [1, 0]])
    adv, ret = grpo_batch_std(rewards, mask, index=[0, 0, 1, 1, 2])
    # Scores 1, 0, 0, 0, 3: group 0 centred to +-0.5, group 1 to 0, the single response of group 2 keeps its 3. The
    # batch's scores have mean 0.8 and unbiased variance (0.04 + 3 * 0.64 + 4.84) / 4 = 1.7; group 0's own std
    # (0.707) would have given +-0.707 instead of +-0.5 / 1.304
    std = math.sqrt(1.7)
    expected = torch.tensor([[0.5, 0.0], [-0.5, -0.5], [0.0, 0.0], [0.0, 0.0], [3.0, 0.0]]) / (std + 1e-6)
    assert torch.allclose(adv, expected, atol=1e-6) and torch.equal(adv, ret)


def test_optimal_token_baseline_hand_computed():
    # rows 0 and 1 share a prompt (2 and 3 tokens), row 2 is alone. Row 0 samples tokens of probability 1/2 from
    # distributions with sum pi^2 = 1/2: each token adds 1 - 2/2 + 1/2 = 0.5 to W; row 1: 1 - 2/4 + 1/4 = 0.75.
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1], [1, 0, 0]])
    rewards = torch.tensor([[0.0, 1, 0], [0, 0, 3], [2, 0, 0]])
    old = torch.log(torch.tensor([[0.5] * 3, [0.25] * 3, [0.5] * 3]))
    sum_sq = torch.tensor([[0.5] * 3, [0.25] * 3, [0.5] * 3])
    adv, ret = optimal_token_baseline(rewards, mask, ["a", "a", "b"], old, sum_sq)
    # returns: row 0 (1, 1), row 1 (3, 3, 3), row 2 (2). W: row 0 (0.5, 1.0), row 1 (0.75, 1.5, 2.25).
    # B_0 = (1 x 0.5 + 3 x 0.75) / 1.25 = 2.2; B_1 = (1 x 1 + 3 x 1.5) / 2.5 = 2.2; at t = 2 only row 1 is left, the
    # group's one longest response: its baseline there is 0 (zero tail), not its own 3. Row 2 alone: no baseline.
    expected = torch.tensor([[-1.2, -1.2, 0], [0.8, 0.8, 3], [2, 0, 0]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1, 0], [3, 3, 3], [2, 0, 0]]))
    # rollout importance weights scale each token's term by their square: row 1's weights of 2 make its W 4 x larger
    # (3, 6, 9): B_0 = (0.5 + 9) / 3.5, B_1 = (1 + 18) / 7
    weights = torch.tensor([[1.0] * 3, [2.0] * 3, [1.0] * 3])
    adv, _ = optimal_token_baseline(rewards, mask, ["a", "a", "b"], old, sum_sq, rollout_is_weights=weights)
    torch.testing.assert_close(adv[0, :2], torch.tensor([1 - 9.5 / 3.5, 1 - 19 / 7]))


def test_index_length_mismatch_is_reported():
    with pytest.raises(ValueError, match="index has 1 entries but the batch has 2 rows"):
        grpo(torch.zeros(2, 1), torch.ones(2, 1), index=["a"])


# ---------------------------------------------------------------- properties


@st.composite
def outcome_batches(draw, max_groups=3, max_group=4, max_len=5):
    """A batch of responses grouped by prompt, right-padded, with an integer outcome reward on the last token."""
    sizes = draw(st.lists(st.integers(1, max_group), min_size=1, max_size=max_groups))
    index = [f"uid{g}" for g, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(index))))  # groups need not be contiguous
    index = [index[i] for i in order]
    lengths = [draw(st.integers(1, max_len)) for _ in index]
    scores = [draw(st.integers(-2, 3)) / 2 for _ in index]
    length = max(lengths)
    mask = torch.zeros(len(index), length)
    rewards = torch.zeros(len(index), length)
    for row, (n, s) in enumerate(zip(lengths, scores)):
        mask[row, :n] = 1
        rewards[row, n - 1] = s
    return rewards, mask, index


def _all_inputs(rewards, mask, index):
    torch.manual_seed(len(index))
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=index,
        values=torch.randn_like(rewards),
        reward_baselines=torch.randn(rewards.shape[0]),
        old_log_probs=-torch.rand_like(rewards) * 3,
        sum_pi_squared=torch.rand_like(rewards),
        gamma=0.95,
        lam=0.9,
    )


@pytest.mark.parametrize("name", ADV_ESTIMATORS.names())
@HYP
@given(batch=outcome_batches(), extra=st.integers(1, 3), garbage=st.floats(-1e3, 1e3))
# whitened in float32, REINFORCE++'s returns here moved by 3.9e-6 with the padding
@example(
    batch=(
        torch.tensor([[0.0, 1.5, 0.0], [0.0, 0.0, 1.5]]),
        torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
        ["u0", "u1"],
    ),
    extra=3,
    garbage=0.0,
)
def test_padding_never_changes_advantages(name, batch, extra, garbage):
    inputs = _all_inputs(*batch)
    adv, ret = compute_advantages(name, **inputs)
    padded = dict(inputs)
    b = inputs["response_mask"].shape[0]
    fill = torch.full((b, extra), garbage)
    for key in ("token_level_rewards", "values", "old_log_probs", "sum_pi_squared"):
        padded[key] = torch.cat([inputs[key], fill], dim=1)
    padded["response_mask"] = torch.cat([inputs["response_mask"], torch.zeros(b, extra)], dim=1)
    adv_p, ret_p = compute_advantages(name, **padded)
    length = adv.shape[1]
    assert torch.allclose(adv_p[:, :length], adv, atol=1e-6) and torch.allclose(ret_p[:, :length], ret, atol=1e-6)
    assert not adv_p[:, length:].any() and not ret_p[:, length:].any()
    # Zero outside the mask in the unpadded call too.
    assert not adv[inputs["response_mask"] == 0].any() and not ret[inputs["response_mask"] == 0].any()


def _per_row(adv, mask):
    """The constant per-response advantage of an outcome estimator."""
    return adv.sum(dim=1) / mask.sum(dim=1)


@HYP
@given(batch=outcome_batches(max_groups=4, max_group=5))
def test_grpo_is_zero_mean_and_unit_std_per_group(batch):
    rewards, mask, index = batch
    adv, _ = grpo(rewards, mask, index)
    per_row = _per_row(adv, mask)
    assert torch.allclose(adv, per_row[:, None] * mask)  # one constant advantage per response
    scores = rewards.sum(dim=1)
    for uid in set(index):
        rows = [i for i, u in enumerate(index) if u == uid]
        a = per_row[rows]
        if len(rows) == 1:
            continue
        assert abs(a.mean().item()) < 1e-6
        if scores[rows].std() > 0:
            # std(a) = std / (std + 1e-6); scores differ by >= 0.5 here, so this is 1 within 2e-6.
            assert abs(a.std().item() - 1.0) < 1e-5
        dr = _per_row(grpo(rewards, mask, index, norm_adv_by_std_in_grpo=False)[0], mask)[rows]
        assert torch.allclose(dr, scores[rows] - scores[rows].mean(), atol=1e-6)


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
@HYP
@given(
    reward=st.floats(-10, 10, allow_nan=False, width=32),
    lengths=st.lists(st.integers(1, 4), min_size=2, max_size=6),
)
def test_identical_rewards_give_zero_advantage(name, reward, lengths):
    n, length = len(lengths), max(lengths)
    mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.zeros(n, length)
    rewards[torch.arange(n), torch.tensor(lengths) - 1] = reward
    adv, _ = compute_advantages(name, token_level_rewards=rewards, response_mask=mask, index=["same"] * n)
    assert not adv.any(), adv


@HYP
@given(batch=outcome_batches(max_groups=3, max_group=5))
def test_rloo_is_score_minus_mean_of_the_others(batch):
    rewards, mask, index = batch
    per_row = _per_row(rloo(rewards, mask, index)[0], mask)
    scores = rewards.sum(dim=1).tolist()
    for i, uid in enumerate(index):
        others = [scores[j] for j, u in enumerate(index) if u == uid and j != i]
        expected = scores[i] - (statistics.fmean(others) if others else 0.0)
        assert per_row[i].item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
@HYP
@given(batch=outcome_batches(), data=st.data())
def test_group_estimators_commute_with_row_permutation(name, batch, data):
    rewards, mask, index = batch
    perm = data.draw(st.permutations(range(len(index))))
    adv, _ = compute_advantages(name, token_level_rewards=rewards, response_mask=mask, index=index)
    p = torch.tensor(perm)
    adv_p, _ = compute_advantages(
        name, token_level_rewards=rewards[p], response_mask=mask[p], index=[index[i] for i in perm]
    )
    assert torch.allclose(adv_p, adv[p], atol=1e-6)


def test_index_may_be_a_tensor_or_numpy_array():
    import numpy as np

    rewards, mask = torch.tensor([[1.0], [0.0], [5.0]]), torch.ones(3, 1)
    expected, _ = grpo(rewards, mask, index=[3, 3, 4])
    # A tensor's elements would hash by identity (every row its own group) unless compared by value.
    assert torch.equal(grpo(rewards, mask, index=torch.tensor([3, 3, 4]))[0], expected)
    assert torch.equal(grpo(rewards, mask, index=np.array(["u", "u", "v"], dtype=object))[0], expected)
