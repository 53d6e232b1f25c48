"""Replica deaths the rollout client met reach the step metrics as `rollout/replica_restarts` and
`rollout/retried_requests`, step by step. The trainer is the real one (tiny model, one rank, in this process); a
recording stand-in replaces the Serve deployment and reports what its client would have counted."""

from __future__ import annotations

from recording_rollout import RecordingRollout
from support import in_process_run_overrides


class FaultyRollout(RecordingRollout):
    """Reports, after its first generate, that replica k3xq9w died and two chunks were resent; nothing later."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faults = [({"k3xq9w"}, 2)]

    def take_faults(self):
        return self.faults.pop(0) if self.faults else (set(), 0)


def test_replica_restarts_and_retried_requests_are_logged_per_step(compose, tiny_model_dir, small_arith_data, tmp_path):
    from app.trainer.setup import build_trainer
    from app.trainer.tracking import read_metrics

    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, small_arith_data),
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=1",
        ]
    )
    build_trainer(cfg, FaultyRollout(vocab_size=1000, n=2, response_len=8), device="cpu").fit()

    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "rollout/replica_restarts" in r]
    assert [(r["step"], r["rollout/replica_restarts"], r["rollout/retried_requests"]) for r in rows] == [
        (1, 1.0, 2.0),
        (2, 0.0, 0.0),
    ]
