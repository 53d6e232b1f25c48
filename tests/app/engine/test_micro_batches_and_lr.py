import math

import pytest
import torch
from support import optim_spec

from app.engine.lr_schedule import lr_factor
from app.engine.micro_batches import (
    balanced_groups,
    fixed_size_groups,
    num_bins_for_budget,
    restore_order,
    token_budget_groups,
)


def test_fixed_size_groups_are_consecutive():
    assert fixed_size_groups(5, 2) == [[0, 1], [2, 3], [4]]
    assert fixed_size_groups(5, None) == [[0, 1, 2, 3, 4]]


def test_token_budget_bin_count():
    # 9+1 | 8+2 | 5+5 fit a budget of 10 exactly: first-fit-decreasing needs 3 bins
    assert num_bins_for_budget([5, 9, 1, 8, 2, 5], 10) == 3
    # a sequence longer than the budget cannot be run within it: an error naming the key to raise
    with pytest.raises(
        ValueError,
        match=r"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=10 is below one "
        r"sequence of 30 tokens; raise it",
    ):
        num_bins_for_budget([30, 1], 10, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu")


def test_budget_groups_fall_back_to_bins_when_balancing_overflows():
    lens = [6, 5, 4, 3, 2]
    # balancing into 2 groups: 6 | 5, 4 -> 9 | 3 -> 9 | 2 onto the first: 11 > 10; first-fit-decreasing fits 10 + 10
    assert [sum(lens[i] for i in g) for g in balanced_groups(lens, 2)] == [11, 9]
    groups = token_budget_groups(lens, 10, 2)
    assert groups == [[0, 2], [1, 3, 4]]  # 6+4 and 5+3+2


def test_budget_groups_never_exceed_the_budget_and_cover_every_row():
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(1, 12, (1,), generator=g))
        budget = int(torch.randint(8, 40, (1,), generator=g))
        lens = torch.randint(1, budget + 1, (n,), generator=g).tolist()
        own = num_bins_for_budget(lens, budget)
        # the ranks agree on the largest count: any count from this rank's own up to one row per group
        count = int(torch.randint(own, n + 1, (1,), generator=g))
        groups = token_budget_groups(lens, budget, count)
        assert len(groups) == count
        assert sorted(i for grp in groups for i in grp) == list(range(n))
        assert all(sum(lens[i] for i in grp) <= budget for grp in groups), (lens, budget, count, groups)


def test_balanced_groups_cover_every_row_once_and_balance_load():
    lens = [5, 9, 1, 8, 2, 5]
    groups = balanced_groups(lens, 3)
    assert sorted(i for g in groups for i in g) == list(range(6))
    loads = sorted(sum(lens[i] for i in g) for g in groups)
    assert loads == [10, 10, 10]  # 9+1, 8+2, 5+5
    with pytest.raises(ValueError, match="cannot split 2 rows into 3"):
        balanced_groups([1, 2], 3)


def test_restore_order_inverts_the_grouping():
    groups = [[2, 0], [3], [1]]
    flat = torch.tensor([10 * i for g in groups for i in g])  # outputs in group order
    assert flat[restore_order(groups)].tolist() == [0, 10, 20, 30]


def test_lr_warmup_then_constant_and_cosine():
    const = optim_spec(lr=1.0, lr_warmup_steps=4, warmup_style="constant")
    # verl/transformers warm-up: step / warmup, so step 0 runs at 0
    assert [lr_factor(s, const) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    cos = optim_spec(lr=1.0, lr_warmup_steps=2, warmup_style="cosine", total_training_steps=6, min_lr_ratio=0.1)
    # after warm-up: 0.1 + 0.9 * 0.5 * (1 + cos(pi * (s - 2) / 4))
    expected = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 4)) for s in range(2, 7)]
    assert [lr_factor(s, cos) for s in range(2, 7)] == pytest.approx(expected)
    assert lr_factor(6, cos) == pytest.approx(0.1)
    ratio = optim_spec(lr_warmup_steps=-1, lr_warmup_steps_ratio=0.5, total_training_steps=8)
    assert lr_factor(2, ratio) == pytest.approx(0.5)  # 4 warm-up steps from the ratio
    with pytest.raises(ValueError, match="total_training_steps"):
        lr_factor(0, optim_spec(warmup_style="cosine", lr_warmup_steps=0, total_training_steps=-1))  # length unknown
    # linear (transformers' default): 1 at the end of warm-up down to min_lr_ratio at the last step, in equal steps
    lin = optim_spec(lr=1.0, lr_warmup_steps=2, warmup_style="linear", total_training_steps=6, min_lr_ratio=0.2)
    assert [lr_factor(s, lin) for s in range(7)] == pytest.approx([0.0, 0.5, 1.0, 0.8, 0.6, 0.4, 0.2])


def test_cosine_cycles_fall_and_rise_between_lr_and_its_minimum():
    # verl's num_cycles: 1.0 falls to min_lr_ratio halfway through the decay and is back at lr at its end
    cycle = optim_spec(lr=1.0, lr_warmup_steps=0, warmup_style="cosine", total_training_steps=4, num_cycles=1.0)
    assert [lr_factor(s, cycle) for s in range(5)] == pytest.approx([1.0, 0.5, 0.0, 0.5, 1.0])
    # 1.5 with a floor of 0.2: 0.2 + 0.8 * 0.5 * (1 + cos(3 pi s / 6)) at s = 0..6
    floor = optim_spec(
        lr=1.0, lr_warmup_steps=0, warmup_style="cosine", total_training_steps=6, num_cycles=1.5, min_lr_ratio=0.2
    )
    assert [lr_factor(s, floor) for s in range(7)] == pytest.approx([1.0, 0.6, 0.2, 0.6, 1.0, 0.6, 0.2])


def test_lr_holds_until_the_last_share_of_steps_then_decays():
    # warm-up, stable, decay: 10 steps, the last half decaying linearly to 0 over scheduler steps 5..10
    wsd = optim_spec(
        lr=1.0, lr_warmup_steps=0, warmup_style="linear", total_training_steps=10, lr_decay_steps_ratio=0.5
    )
    assert [lr_factor(s, wsd) for s in range(11)] == pytest.approx([1.0] * 6 + [0.8, 0.6, 0.4, 0.2, 0.0])
    # a warm-up that ends after the decay would start: the decay starts at the end of warm-up instead
    late = optim_spec(
        lr=1.0, lr_warmup_steps=4, warmup_style="linear", total_training_steps=8, lr_decay_steps_ratio=0.75
    )
    assert [lr_factor(s, late) for s in range(9)] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 0.75, 0.5, 0.25, 0.0])
    # cosine over the last 4 of 8 steps: 0.5 * (1 + cos(pi * (s - 4) / 4)) from step 4 on
    cos = optim_spec(lr=1.0, lr_warmup_steps=0, warmup_style="cosine", total_training_steps=8, lr_decay_steps_ratio=0.5)
    expected = [1.0] * 4 + [0.5 * (1 + math.cos(math.pi * (s - 4) / 4)) for s in range(4, 9)]
    assert [lr_factor(s, cos) for s in range(9)] == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"lr_decay_steps_ratio=0(\.0)? must lie in \(0, 1\]"):
        lr_factor(0, optim_spec(warmup_style="linear", total_training_steps=8, lr_decay_steps_ratio=0.0))
