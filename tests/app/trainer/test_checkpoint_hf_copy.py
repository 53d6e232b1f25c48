"""`actor_rollout_ref.actor.checkpoint.save_contents` with hf_model (verl's layout): each checkpoint holds the policy
as a Hugging Face folder in actor/huggingface/, the weights the run's export writes at that step, and a resume from
it works as from any checkpoint."""

from __future__ import annotations

from safetensors.torch import load_file
from support import saving_in_process_trainer

from app.trainer.tracking import read_metrics

HF_COPY = ["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]


def test_each_checkpoint_holds_the_policy_as_the_export_writes_it(compose, tiny_model_dir, small_arith_data, tmp_path):
    out = tmp_path / "run"
    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 1, HF_COPY).fit()
    copy = out / "global_step_1" / "actor" / "huggingface"
    assert (copy / "config.json").is_file() and (copy / "tokenizer_config.json").is_file()
    exported = load_file(out / "hf_model" / "model.safetensors")  # the step-1 policy, exported as the run ends
    saved = load_file(copy / "model.safetensors")
    assert saved.keys() == exported.keys() and all(saved[k].equal(exported[k]) for k in saved)

    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 2, HF_COPY).fit()  # resumes at step 1
    assert [m["step"] for m in read_metrics(out / "metrics.jsonl") if "critic/score/mean" in m] == [1, 2]
    assert (out / "global_step_2" / "actor" / "huggingface" / "model.safetensors").is_file()


def test_without_hf_model_a_checkpoint_holds_no_copy(compose, tiny_model_dir, small_arith_data, tmp_path):
    out = tmp_path / "run"
    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 1).fit()
    assert (out / "global_step_1" / "actor").is_dir()
    assert not (out / "global_step_1" / "actor" / "huggingface").exists()
