"""Self-imitation in the real trainer (tiny model, one rank, in this process, a recording stand-in for the rollout
service): earlier answers are replayed from the second step on, and a checkpoint keeps them for the resumed run."""

from __future__ import annotations

import torch
from support import saving_in_process_trainer

from app.trainer.tracking import read_metrics

SELF_IMITATION = [
    "actor_rollout_ref.actor.self_imitation.coef=0.5",
    "actor_rollout_ref.actor.self_imitation.min_score=0.0",  # every answer: random tokens score 0
    "actor_rollout_ref.actor.self_imitation.buffer_size=4",
    "actor_rollout_ref.actor.self_imitation.rows_per_step=3",
]


def test_answers_are_replayed_from_step_2_and_survive_a_resume(compose, tiny_model_dir, small_arith_data, tmp_path):
    out = tmp_path / "run"
    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 2, SELF_IMITATION).fit()
    steps = [m for m in read_metrics(out / "metrics.jsonl") if "actor/self_imitation_rows" in m]
    # 2 prompts x 2 samples a step, all kept: step 1 has nothing earlier to replay, step 2 replays 3 of step 1's 4
    assert [m["actor/self_imitation_rows"] for m in steps] == [0.0, 3.0]
    assert [m["actor/self_imitation_kept"] for m in steps] == [4.0, 4.0]  # at most buffer_size
    assert steps[1]["actor/self_imitation_nll"] > 0
    saved = torch.load(out / "global_step_2" / "self_imitation_rank0.pt", weights_only=True)
    assert len(saved["input_ids"]) == 4

    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 3, SELF_IMITATION).fit()  # from step 2
    resumed = [m for m in read_metrics(out / "metrics.jsonl") if "actor/self_imitation_rows" in m][-1]
    assert resumed["actor/self_imitation_rows"] == 3.0  # an empty buffer would have replayed nothing
