"""Each training step gives its freed heap back to the OS after the actor update (so vLLM's weight reload never
meets the update's activation pages still resident) and again at its end: the trainer runs for hours next to vLLM,
and glibc would otherwise keep every step's activation and sync buffers resident (serve.memory)."""
from __future__ import annotations

from recording_rollout import RecordingRollout


def test_the_heap_is_trimmed_after_each_update_and_after_each_step(compose, tiny_model_dir, small_arith_data,
                                                                   tmp_path, monkeypatch):
    import app.trainer.loop as loop
    from app.trainer.setup import build_trainer

    cfg = compose([
        f"actor_rollout_ref.model.path={tiny_model_dir}", f"data.train_files={small_arith_data / 'train.parquet'}",
        "data.val_files=''", "data.max_prompt_length=256", "data.max_response_length=8",
        "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
        "trainer.total_training_steps=3", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.logger=[jsonl]", f"trainer.default_local_dir={tmp_path / 'run'}",
        "reward_model.num_workers=1",
    ])
    rollout = RecordingRollout(vocab_size=1000, n=2, response_len=8)
    monkeypatch.setattr(loop, "release_free_heap", lambda: rollout.calls.append("trim"))
    build_trainer(cfg, rollout, device="cpu").fit()
    step = ["generate", "trim", "update_weights", "trim"]
    # three steps, each trimmed between its update and its sync, and after it; the export's validation is not a step
    assert rollout.calls[:12] == step * 3
    assert rollout.calls.count("trim") == 6
