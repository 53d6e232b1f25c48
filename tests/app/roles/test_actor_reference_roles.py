"""Actor and reference roles on the tiny random Llama, configured through the real config schema."""

from __future__ import annotations

import pytest
import torch

from app.batch import TensorBatch
from app.config.schema import ActorRolloutRefConfig
from app.roles.factory import build_actor, build_reference

PROMPTS, RESPONSES = [5, 3, 6, 2, 4, 6, 3, 5], [4, 2, 4, 3, 4, 1, 3, 4]
ACTOR_METRICS = {
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "actor/pg_clipfrac_lower",
}


def _config(model_dir, **actor_overrides):
    cfg = ActorRolloutRefConfig()
    cfg.model.path = str(model_dir)
    actor = cfg.actor
    actor.ppo_mini_batch_size = 4  # prompts; rollout.n = 1 -> 2 mini-batches of 4 samples
    actor.ppo_micro_batch_size_per_gpu = 2
    actor.optim.lr = 1e-2
    actor.optim.weight_decay = 0.0
    # bf16 as before `auto` existed, on every machine: the reference must equal the actor to the bit in it
    actor.fsdp_config.mixed_precision.param_dtype = cfg.ref.fsdp_config.mixed_precision.param_dtype = "bf16"
    for key, value in actor_overrides.items():
        setattr(actor, key, value)
    return cfg


def _mean_log_prob(log_probs, mask, rows):
    return float((log_probs[rows] * mask[rows]).sum() / mask[rows].sum())


def _grad_norm_at(actor, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)  # answers of 1-4 tokens: padded to a width of 4
    batch.meta["temperature"] = 1.0
    batch["advantages"] = torch.tensor([1.0, -1.0] * 4)[:, None] * batch["response_mask"].float()
    return actor.update_policy(batch)["actor/grad_norm"]


def test_seq_mean_token_sum_norm_divides_by_loss_scale_factor_not_the_padded_width(tiny_llama_dir, make_rl_batch):
    # Dr. GRPO divides by a constant (verl: the response budget) so a batch of short answers is not scaled up: at a
    # factor of 12, three times the padded width, the gradient is a third of the one divided by the width
    norms = {}
    for factor in (None, 12.0):  # None: an unvalidated config, which divides by the padded width
        cfg = _config(tiny_llama_dir, ppo_mini_batch_size=8, loss_agg_mode="seq-mean-token-sum-norm")
        cfg.actor.loss_scale_factor = factor
        cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"  # the ratio exact to float rounding
        norms[factor] = _grad_norm_at(build_actor(cfg, device="cpu", seed=0), make_rl_batch)
    assert norms[12.0] == pytest.approx(norms[None] / 3, rel=1e-5)


def test_a_replayed_answer_weighs_what_a_fresh_sample_with_advantage_coef_weighs(tiny_llama_dir, make_rl_batch):
    # self-imitation: the fresh samples carry no advantage, so the whole gradient is the two replayed answers'. Each is
    # a sample with advantage coef, normalised by the fresh mini-batch's 8 rows (not the 10 with the replay): the
    # gradient is that of the same two answers trained alone as samples with advantage coef, times 2 / 8
    def actor_for(mini_batch):
        cfg = _config(tiny_llama_dir, ppo_mini_batch_size=mini_batch, loss_agg_mode="seq-mean-token-sum-norm")
        cfg.actor.loss_scale_factor = 4.0
        cfg.actor.self_imitation.coef = 0.5
        cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"  # the ratio exact to float rounding
        return build_actor(cfg, device="cpu", seed=0)

    def answers():
        batch = make_rl_batch([4, 2], [3, 4], seed=1)  # other lengths than the fresh rows': re-padded to join them
        batch.meta["temperature"] = 1.0
        return batch

    fresh = make_rl_batch(PROMPTS, RESPONSES)
    fresh.meta["temperature"] = 1.0
    fresh["advantages"] = torch.zeros_like(fresh["response_mask"], dtype=torch.float32)
    replay = answers()
    replay["replayed"] = torch.ones(2)
    actor = actor_for(8)
    before = actor.compute_log_prob(answers())["old_log_probs"]
    metrics = actor.update_policy(fresh, replay=replay)

    alone = answers()
    alone["advantages"] = 0.5 * alone["response_mask"].float()
    alone_norm = actor_for(2).update_policy(alone)["actor/grad_norm"]
    assert metrics["actor/grad_norm"] == pytest.approx(alone_norm * 2 / 8, rel=1e-5)
    mask = alone["response_mask"]
    assert metrics["actor/self_imitation_nll"] == pytest.approx(float(-(before * mask).sum() / mask.sum()), rel=1e-5)
    assert metrics["actor/pg_loss"] == 0.0  # the replayed answers are not in the policy loss


def test_update_raises_log_probs_of_positive_advantage_samples(tiny_llama_dir, make_rl_batch):
    cfg = _config(tiny_llama_dir, ppo_epochs=2, shuffle=True)
    actor = build_actor(cfg, device="cpu", seed=0)
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.meta["temperature"] = 1.0
    batch.update(actor.compute_log_prob(batch))
    sign = torch.tensor([1.0, -1.0] * 4)  # rows 0, 2, 4, 6 good; 1, 3, 5, 7 bad
    batch["advantages"] = sign[:, None] * batch["response_mask"].float()
    metrics = actor.update_policy(batch)
    assert ACTOR_METRICS <= metrics.keys()
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert metrics["actor/lr"] == pytest.approx(1e-2)  # no warm-up configured
    assert 0.0 <= metrics["actor/pg_clipfrac"] <= 1.0 and metrics["actor/grad_norm"] > 0
    assert "actor/kl_loss" not in metrics  # use_kl_loss is off
    after = actor.compute_log_prob(batch)["old_log_probs"]
    mask = batch["response_mask"]
    good, bad = [0, 2, 4, 6], [1, 3, 5, 7]
    old = batch["old_log_probs"]
    assert _mean_log_prob(after, mask, good) > _mean_log_prob(old, mask, good) + 0.05
    assert _mean_log_prob(after, mask, bad) < _mean_log_prob(old, mask, bad) - 0.05


def test_lora_reference_is_the_base_model_and_kl_loss_starts_at_zero(tiny_llama_dir, make_rl_batch):
    cfg = _config(tiny_llama_dir, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="low_var_kl", ppo_mini_batch_size=8)
    cfg.model.lora_rank = 4
    actor = build_actor(cfg, device="cpu", seed=0)
    reference = build_reference(cfg, actor.engine, device="cpu")
    assert reference.engine is actor.engine  # no second copy of the weights
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.update(actor.compute_log_prob(batch))
    batch.update(reference.compute_ref_log_prob(batch))
    # lora_B starts at zero: the adapter adds exactly nothing yet
    assert torch.equal(batch["ref_log_prob"], batch["old_log_probs"])
    batch["advantages"] = torch.linspace(-1, 1, len(batch))[:, None] * batch["response_mask"]
    first = actor.update_policy(batch)
    assert first["actor/kl_loss"] == 0.0  # one mini-batch: the policy still equals the reference
    second = actor.update_policy(batch)
    assert second["actor/kl_loss"] > 0.0
    # the reference did not move with the adapter
    torch.testing.assert_close(
        reference.compute_ref_log_prob(batch)["ref_log_prob"], batch["ref_log_prob"], rtol=0, atol=0
    )
    del batch.tensors["ref_log_prob"]
    with pytest.raises(KeyError, match="ref_log_prob"):
        actor.update_policy(batch)


def test_full_finetune_reference_matches_initial_actor(tiny_llama_dir, make_rl_batch):
    cfg = _config(tiny_llama_dir)
    actor = build_actor(cfg, device="cpu", seed=0)
    reference = build_reference(cfg, actor.engine, device="cpu")
    assert reference.engine is not actor.engine and not reference.disable_adapter
    batch = make_rl_batch(PROMPTS, RESPONSES)
    torch.testing.assert_close(
        reference.compute_ref_log_prob(batch)["ref_log_prob"],
        actor.compute_log_prob(batch, calculate_entropy=False)["old_log_probs"],
        rtol=0,
        atol=0,
    )


def test_a_mini_batch_that_does_not_divide_the_batch_leaves_a_smaller_last_step(tiny_llama_dir, make_rl_batch):
    # verl's split: 8 rows in mini-batches of 3 are three optimiser steps on rows 0-2, 3-5 and 6-7, each normalised
    # over its own rows; the same three steps taken as three updates of one mini-batch each (constant lr, the first
    # policy's old log-probs throughout) end at the same weights
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.meta["temperature"] = 1.0
    batch["advantages"] = torch.linspace(-1, 1, len(batch))[:, None] * batch["response_mask"]

    def actor_with(mini_batch):
        cfg = _config(tiny_llama_dir, ppo_mini_batch_size=mini_batch, shuffle=False)
        cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"
        return build_actor(cfg, device="cpu", seed=0)

    whole = actor_with(3)
    batch.update(whole.compute_log_prob(batch, calculate_entropy=False))
    assert not whole.is_on_policy(len(batch))
    steps = whole.engine.optimizer_step
    calls = []
    whole.engine.optimizer_step = lambda: calls.append(1) or steps()
    whole.update_policy(TensorBatch(dict(batch.tensors), meta=dict(batch.meta)))
    assert len(calls) == 3
    piecewise = actor_with(3)
    for rows in (slice(0, 3), slice(3, 6), slice(6, 8)):
        piecewise.update_policy(batch.index(rows))
    torch.testing.assert_close(
        whole.compute_log_prob(batch, calculate_entropy=False)["old_log_probs"],
        piecewise.compute_log_prob(batch, calculate_entropy=False)["old_log_probs"],
        rtol=0,
        atol=1e-6,
    )


def test_on_policy_update_without_old_log_probs_equals_the_update_with_them(tiny_llama_dir, make_rl_batch):
    # one epoch over one mini-batch: old log-probs equal the update's own, so the forward pass can be skipped
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch["advantages"] = torch.linspace(-1, 1, len(batch))[:, None] * batch["response_mask"]
    results = []
    for give_old in (True, False):
        cfg = _config(tiny_llama_dir, ppo_mini_batch_size=8)
        cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"
        actor = build_actor(cfg, device="cpu", seed=0)
        assert actor.is_on_policy(len(batch))
        data = TensorBatch(dict(batch.tensors))
        if give_old:
            data.update(actor.compute_log_prob(data, calculate_entropy=False))
        metrics = actor.update_policy(data)
        results.append((metrics, actor.compute_log_prob(batch, calculate_entropy=False)["old_log_probs"]))
    (with_old, after_with), (without, after_without) = results
    assert without["actor/ppo_kl"] == 0.0 and without["actor/pg_clipfrac"] == 0.0
    assert abs(with_old["actor/pg_loss"] - without["actor/pg_loss"]) < 1e-6
    torch.testing.assert_close(after_without, after_with, rtol=0, atol=1e-5)
    assert not build_actor(_config(tiny_llama_dir, ppo_epochs=2), device="cpu", seed=0).is_on_policy(8)


def test_lora_reference_pass_then_bf16_micro_batched_update(tiny_llama_dir, make_rl_batch):
    # The on-policy step order: the reference pass (adapter off, no grad) comes straight before an update split
    # into micro-batches in bf16. peft's own disable_adapter() toggles requires_grad, after which FSDP2 reduced the
    # second micro-batch's bf16 gradient into the fp32 master weight and raised; this must train normally.
    cfg = _config(tiny_llama_dir, use_kl_loss=True, kl_loss_coef=0.1, ppo_mini_batch_size=8)
    cfg.model.lora_rank = 4
    cfg.actor.fsdp_config.mixed_precision.param_dtype = "bf16"
    actor = build_actor(cfg, device="cpu", seed=0)
    reference = build_reference(cfg, actor.engine, device="cpu")
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.update(reference.compute_ref_log_prob(batch))
    batch["advantages"] = torch.linspace(-1, 1, len(batch))[:, None] * batch["response_mask"]
    metrics = actor.update_policy(batch)  # no old_log_probs: the on-policy path, 4 micro-batches of 2
    assert metrics["actor/grad_norm"] > 0
    assert all(p.dtype == torch.float32 for p in actor.engine.model.parameters() if p.requires_grad)


def test_rollout_is_weights_each_token_loss_by_old_over_sampler(tiny_llama_dir, make_rl_batch):
    from app.config.schema import RolloutCorrectionConfig

    # one on-policy mini-batch (ratio 1, so pg_loss = -token-mean(A * w)); the sampler's log-probs are the old ones
    # minus ln 2, so every weight is 2 (under the 3.0 truncation) and the weighted loss is twice the unweighted one
    losses = {}
    for level in (None, "token", "sequence"):
        cfg = _config(tiny_llama_dir, ppo_mini_batch_size=8, use_kl_loss=False)
        correction = RolloutCorrectionConfig(rollout_is=level, rollout_is_threshold=3.0 if level == "token" else 9.0)
        actor = build_actor(cfg, device="cpu", seed=0, rollout_correction=correction)
        batch = make_rl_batch(PROMPTS, RESPONSES)
        batch.meta["temperature"] = 1.0
        batch.update(actor.compute_log_prob(batch))
        mask = batch["response_mask"].float()
        # sequence level: spread ln 2 over each response's tokens, so its product of ratios is 2 too
        gap = mask * (0.6931471805599453 if level != "sequence" else 0.6931471805599453 / mask.sum(-1, keepdim=True))
        batch["rollout_log_probs"] = batch["old_log_probs"] - gap
        batch["advantages"] = torch.tensor([1.0, -0.5] * 4)[:, None] * mask
        metrics = actor.update_policy(batch)
        losses[level] = metrics["actor/pg_loss"]
        if level is not None:
            assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(2.0, rel=1e-5)
            assert metrics["rollout_corr/rollout_is_std"] == pytest.approx(0.0, abs=1e-3)
    assert losses["token"] == pytest.approx(2 * losses[None], rel=1e-5)
    assert losses["sequence"] == pytest.approx(2 * losses[None], rel=1e-5)


def test_token_budget_errors_name_the_verl_key_of_each_pass():
    """A sequence longer than a budget stops with the key to raise (app/engine/micro_batches.py): the actor's update
    and the reference's engine name actor.ppo_max_token_len_per_gpu, the critic its own, each log-prob pass its own."""
    from app.config.schema import ActorConfig, CriticConfig, ModelConfig, RefConfig, RolloutConfig
    from app.roles.factory import _log_prob_batching, actor_engine_spec, critic_engine_spec, ref_engine_spec

    model, actor = ModelConfig(path="/m"), ActorConfig()
    assert (
        actor_engine_spec(model, actor, seed=0, rollout_n=2).max_token_len_key
        == "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    )
    assert (
        ref_engine_spec(model, RefConfig(), actor).max_token_len_key
        == "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    )
    critic = CriticConfig()
    critic.model.path = "/m"
    critic.ppo_mini_batch_size = 4
    assert critic_engine_spec(critic, seed=0, rollout_n=2).max_token_len_key == "critic.ppo_max_token_len_per_gpu"
    assert (
        _log_prob_batching(RolloutConfig(), "actor_rollout_ref.rollout")["log_prob_max_token_len_key"]
        == "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"
    )


def _weights(engine):
    return {name: piece.detach().float().clone() for name, piece in engine.local_weights()}


@pytest.mark.parametrize("strategy, stage", [("fsdp2", None), ("deepspeed", 2)])  # ZeRO-3: refused (no checkpoint)
def test_a_synced_reference_moves_toward_the_actor(tiny_llama_dir, make_rl_batch, tmp_path, strategy, stage):
    # TR-DPO's sync (ref.sync_ref_model): after an update the actor differs from the reference; moving a quarter of
    # the way gives reference + 0.25 x (actor - reference) in every weight, and moving all the way gives the
    # actor's own log-probs. The moved reference is what a checkpoint keeps.
    cfg = _config(tiny_llama_dir, ppo_mini_batch_size=8, strategy=strategy)
    cfg.actor.fsdp_config.mixed_precision.param_dtype = cfg.ref.fsdp_config.mixed_precision.param_dtype = "fp32"
    if stage is not None:
        cfg.actor.deepspeed_config.zero_stage = stage
    actor = build_actor(cfg, device="cpu", seed=0)
    reference = build_reference(cfg, actor.engine, device="cpu")
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.meta["temperature"] = 1.0
    batch["advantages"] = torch.linspace(-1, 1, len(batch))[:, None] * batch["response_mask"]
    actor.update_policy(batch)
    before, target = _weights(reference.engine), _weights(actor.engine)
    assert any(not torch.equal(before[n], target[n]) for n in before)
    reference.move_toward(actor.engine, 0.25)
    after = _weights(reference.engine)
    for name in before:
        torch.testing.assert_close(after[name], before[name] + 0.25 * (target[name] - before[name]))
    reference.move_toward(actor.engine, 1.0)
    torch.testing.assert_close(
        reference.compute_ref_log_prob(batch)["ref_log_prob"],
        actor.compute_log_prob(batch, calculate_entropy=False)["old_log_probs"],
        rtol=0,
        atol=1e-6,
    )
    reference.engine.save_checkpoint(str(tmp_path / "ref"))
    fresh = build_reference(cfg, actor.engine, device="cpu")
    fresh.engine.load_checkpoint(str(tmp_path / "ref"))
    torch.testing.assert_close(_weights(fresh.engine), _weights(reference.engine), rtol=0, atol=0)


def test_a_reference_moves_only_toward_an_engine_of_its_own_layout(tiny_llama_dir):
    lora = _config(tiny_llama_dir)
    lora.model.lora_rank = 4
    actor = build_actor(lora, device="cpu", seed=0)
    with pytest.raises(ValueError, match="LoRA reference is the actor's own base model"):
        build_reference(lora, actor.engine, device="cpu").move_toward(actor.engine, 0.5)
    # a full reference against a LoRA actor: the adapter's extra weights break the one-to-one match, named
    reference = build_reference(_config(tiny_llama_dir), None, device="cpu")
    with pytest.raises(ValueError, match=r"the reference's weight .* does not match the actor's .*sharded alike"):
        reference.move_toward(actor.engine, 0.5)


@pytest.mark.parametrize("remove_padding", [True, False])
def test_the_log_prob_pass_gives_each_tokens_sum_of_squared_probabilities(
    tiny_llama_dir, make_rl_batch, remove_padding
):
    # actor.calculate_sum_pi_squared: sum_v pi_v^2 of the distribution each response token was drawn from, at the
    # sampling temperature; it is at least the drawn token's own pi^2 and at most 1, and 0 at padding. The same
    # tokens through the Hugging Face model directly give the same values.
    from transformers import AutoModelForCausalLM

    cfg = _config(tiny_llama_dir, calculate_sum_pi_squared=True)
    cfg.actor.fsdp_config.mixed_precision.param_dtype = "fp32"
    cfg.model.use_remove_padding = remove_padding
    actor = build_actor(cfg, device="cpu", seed=0)
    batch = make_rl_batch(PROMPTS, RESPONSES)
    batch.meta["temperature"] = 0.7
    out = actor.compute_log_prob(batch, calculate_entropy=False)
    mask = batch["response_mask"].bool()
    sq, own = out["sum_pi_squared"], out["old_log_probs"].exp() ** 2
    assert (sq[~mask] == 0).all() and (sq[mask] >= own[mask] - 1e-6).all() and (sq[mask] <= 1).all()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    width = batch["responses"].shape[1]
    probs = torch.softmax(logits[:, -width - 1 : -1] / 0.7, dim=-1)
    torch.testing.assert_close(sq[mask], (probs**2).sum(-1)[mask], rtol=1e-4, atol=1e-6)
