"""The no-signal guard: the share of groups whose samples scored unlike, and the warning after a stretch without."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from yes_no_rollout import YesNoRollout

from app.trainer.signal_guard import SHARE_METRIC, STEPS_METRIC, NoSignalGuard, group_counts


def test_group_counts_counts_groups_whose_samples_differ():
    # groups a (1, 0: differ), b (0, 0: alike), c (a single sample: no peer, no signal)
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    assert group_counts(scores, ["a", "a", "b", "b", "c"]) == (1, 3)


def test_the_guard_warns_once_per_stretch_of_low_signal_steps():
    guard = NoSignalGuard(steps=2, min_share=0.1)
    shares = {1: (0, 4), 2: (1, 10), 3: (0, 4), 4: (3, 4), 5: (0, 4), 6: (0, 4), 7: (0, 4)}
    seen = {step: guard.observe(step, *counts) for step, counts in shares.items()}
    # 1/10 is still "at most 10%": steps 1-3 are one stretch (it warns when it reaches 2), step 4 (75%) ends it
    assert [step for step, (_, warning) in seen.items() if warning] == [2, 6]
    assert "steps 5-6" in seen[6][1] and "actor_rollout_ref.rollout.temperature" in seen[6][1]
    assert [m[STEPS_METRIC] for m, _ in seen.values()] == [1, 2, 3, 0, 1, 2, 3]
    assert seen[4][0][SHARE_METRIC] == 0.75


def test_steps_zero_measures_but_never_warns():
    guard = NoSignalGuard(steps=0, min_share=0.1)
    assert all(guard.observe(step, 0, 4)[1] is None for step in range(1, 6))


def _run(compose, tiny_model_dir, small_arith_data, out: Path, mixed: bool):
    from transformers import AutoTokenizer

    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            "data.val_files=''",
            "data.max_prompt_length=256",
            "data.max_response_length=8",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=3",
            "trainer.num_workers=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "trainer.no_signal_steps=2",
            f"custom_reward_function.path={Path(__file__).with_name('yes_reward.py')}",
            "reward_model.num_workers=0",
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
        ]
    )
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    yes_id, no_id = (tok.encode(w, add_special_tokens=False)[0] for w in (" yes", " no"))
    build_trainer(cfg, YesNoRollout(yes_id, no_id, n=3, long_len=2, mixed=mixed), device="cpu").fit()
    return [
        json.loads(line)
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if SHARE_METRIC in json.loads(line)
    ]


@pytest.mark.parametrize("mixed", [False, True])
def test_a_run_without_signal_says_so_in_the_console_and_the_metrics(
    compose, tiny_model_dir, small_arith_data, tmp_path, caplog, mixed
):
    with caplog.at_level(logging.WARNING, logger="app.trainer.loop"):
        steps = _run(compose, tiny_model_dir, small_arith_data, tmp_path / "run", mixed)
    warnings = [r.getMessage() for r in caplog.records if "scored unlike" in r.getMessage()]
    # mixed: of each step's 2 groups, one has a "yes" among its "no"s (share 1/2); otherwise every group is all "no"
    assert [m[SHARE_METRIC] for m in steps] == ([0.5] * 3 if mixed else [0.0] * 3)
    assert warnings == ([] if mixed else [warnings[0]]) and (mixed or "steps 1-2" in warnings[0])
