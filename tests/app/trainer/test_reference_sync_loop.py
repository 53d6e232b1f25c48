"""A moving reference (`actor_rollout_ref.ref.sync_ref_model`, TR-DPO) in the real trainer (tiny model, one rank, in
this process, a recording stand-in for the rollout service): it moves on the steps it is due, and a checkpoint keeps
it for the resumed run."""

from __future__ import annotations

import torch
from support import saving_in_process_trainer

from app.trainer.tracking import read_metrics

SYNCED = [
    "actor_rollout_ref.model.lora_rank=0",  # a reference of its own weights: full fine-tuning
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.optim.lr=1e-2",  # steps large enough to move the weights in fp32 and bf16 alike
    "actor_rollout_ref.ref.sync_ref_model=true",
    "actor_rollout_ref.ref.ref_model_sync_steps=2",
    "actor_rollout_ref.ref.ref_model_mixup_alpha=0.5",
]


def _reference_weights(trainer):
    return {n: t.detach().float().clone() for n, t in trainer.learner.reference.engine.local_weights()}


def test_the_reference_moves_every_sync_steps_and_a_checkpoint_keeps_it(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    out = tmp_path / "run"
    run = saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 3, SYNCED)
    initial = _reference_weights(run)
    run.fit()
    synced = [m["step"] for m in read_metrics(out / "metrics.jsonl") if "timing_s/sync_ref" in m]
    assert synced == [2]  # steps 1 and 3 are not due
    moved = _reference_weights(run)
    assert any(not torch.equal(moved[n], initial[n]) for n in initial)
    assert (out / "global_step_3" / "ref").is_dir()

    resumed = saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 3, SYNCED)
    assert all(torch.equal(_reference_weights(resumed)[n], initial[n]) for n in initial)  # before the resume
    resumed.fit()  # resumes at step 3, the last: loads the checkpoint and trains nothing
    after = _reference_weights(resumed)
    assert all(torch.equal(after[n], moved[n]) for n in moved)
