"""The schema loader: wrong keys and values are named, derived defaults are filled."""

import pytest
from support import with_dotted

from app.config import ConfigError, load_config

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 8},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}, "rollout": {"n": 4}},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"num_workers": 2},
}


def with_(**overrides):
    """BASE with dotted-key overrides, e.g. with_(**{"data.seed": 3})."""
    return with_dotted(BASE, **overrides)


def test_valid_config_fills_derived_defaults():
    cfg = load_config(with_(**{"data.max_response_length": 64}))
    # response_length follows data.max_response_length unless set, as in verl's interpolation
    assert cfg.actor_rollout_ref.rollout.response_length == 64
    assert cfg.critic.model.path == "/models/x"
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6


def test_loss_scale_factor_defaults_to_the_response_budget():
    # verl divides seq-mean-token-sum-norm by the horizon it pads every answer to: data.max_response_length
    assert load_config(with_(**{"data.max_response_length": 64})).actor_rollout_ref.actor.loss_scale_factor == 64
    given = load_config(with_(**{"data.max_response_length": 64, "actor_rollout_ref.actor.loss_scale_factor": 100}))
    assert given.actor_rollout_ref.actor.loss_scale_factor == 100
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.loss_scale_factor=0(\.0)? must be > 0"):
        load_config(with_(**{"actor_rollout_ref.actor.loss_scale_factor": 0}))


def test_unknown_key_is_named_with_its_path():
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.actor\.lr under actor_rollout_ref\.actor; did you mean "
        r"actor_rollout_ref\.actor\.optim\.lr\?; known keys: .*optim",
    ):
        load_config(with_(**{"actor_rollout_ref.actor.lr": 1e-5}))  # a key of that name one level down
    with pytest.raises(
        ConfigError,
        match=r"algorithm\.adv_estimater under algorithm; did you mean "
        r"algorithm\.adv_estimator\?",
    ):
        load_config(with_(**{"algorithm.adv_estimater": "grpo"}))  # a typo of a sibling
    with pytest.raises(ConfigError, match=r"unknown key trainer\.zzz under trainer; known keys"):
        load_config(with_(**{"trainer.zzz": 1}))  # nothing close: no guess


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError, match=r"data\.train_batch_size: expected an integer, got 'eight'"):
        load_config(with_(**{"data.train_batch_size": "eight"}))


def test_literal_lists_the_allowed_values():
    with pytest.raises(ConfigError, match=r"data\.truncation: 'chop' is not one of 'error', 'left', 'right', 'middle'"):
        load_config(with_(**{"data.truncation": "chop"}))


def test_float_given_as_yaml_string_is_accepted():
    # YAML 1.1 parses `3e-6` (no dot) as a string; users write it that way all the time
    cfg = load_config(with_(**{"actor_rollout_ref.actor.optim.lr": "3e-6"}))
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-6, rel=0, abs=0)


def test_minibatch_larger_than_the_batch_names_both_keys():
    with pytest.raises(ConfigError, match=r"actor\.ppo_mini_batch_size=16 is larger than data\.train_batch_size=8"):
        load_config(with_(**{"actor_rollout_ref.actor.ppo_mini_batch_size": 16}))
    critic = {"algorithm.adv_estimator": "gae", "critic.ppo_mini_batch_size": 16}
    with pytest.raises(ConfigError, match=r"^critic\.ppo_mini_batch_size=16 is larger than data\.train_batch_size=8"):
        load_config(with_(**critic))
    # verl checks it only without a token budget: then a larger mini-batch is the whole batch
    load_config(
        with_(**{"actor_rollout_ref.actor.ppo_mini_batch_size": 16, "actor_rollout_ref.actor.use_dynamic_bsz": True})
    )


def test_minibatch_that_does_not_divide_the_batch_is_accepted_and_said(caplog):
    # verl's split: 8 prompts in mini-batches of 3 are three optimiser steps, the last on 2 prompts
    with caplog.at_level("INFO", logger="app.config.validate"):
        cfg = load_config(with_(**{"actor_rollout_ref.actor.ppo_mini_batch_size": 3, "actor_rollout_ref.rollout.n": 2}))
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 3
    assert "makes 3 optimiser steps, the last on the remaining 2 prompts" in caplog.text


def test_a_moving_reference_needs_its_own_weights_laid_out_as_the_actors():
    synced = {"actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.ref.sync_ref_model": True}
    cfg = load_config(with_(**synced))
    assert (cfg.actor_rollout_ref.ref.ref_model_sync_steps, cfg.actor_rollout_ref.ref.ref_model_mixup_alpha) == (
        512,
        0.6,
    )
    with pytest.raises(ConfigError, match=r"sync_ref_model=true, but this run has no reference model"):
        load_config(with_(**{"actor_rollout_ref.ref.sync_ref_model": True}))
    assert load_config(with_(**{"actor_rollout_ref.ref.sync_ref_model": True, "algorithm.use_kl_in_reward": True}))
    with pytest.raises(ConfigError, match=r"sync_ref_model=true with LoRA \(actor_rollout_ref\.model\.lora_rank=8\)"):
        load_config(with_(**synced, **{"actor_rollout_ref.model.lora_rank": 8}))
    with pytest.raises(ConfigError, match=r"ref_model_sync_steps=0 must be >= 1"):
        load_config(with_(**synced, **{"actor_rollout_ref.ref.ref_model_sync_steps": 0}))
    with pytest.raises(ConfigError, match=r"ref_model_mixup_alpha=1\.5 must be in \(0, 1\]"):
        load_config(with_(**synced, **{"actor_rollout_ref.ref.ref_model_mixup_alpha": 1.5}))
    with pytest.raises(ConfigError, match=r"actor\.fsdp_config\.fsdp_size=1 and .*ref\.fsdp_config\.fsdp_size=-1"):
        load_config(with_(**synced, **{"actor_rollout_ref.actor.fsdp_config.fsdp_size": 1}))
    # 2 and -1 both shard one copy over the 2 ranks: the same layout
    assert load_config(with_(**synced, **{"actor_rollout_ref.actor.fsdp_config.fsdp_size": 2}))


def test_the_optimal_token_baseline_needs_the_pass_that_computes_sum_pi_squared():
    otb = {"algorithm.adv_estimator": "optimal_token_baseline"}
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.calculate_sum_pi_squared=true \(as in verl\)"):
        load_config(with_(**otb))
    wanted = {**otb, "actor_rollout_ref.actor.calculate_sum_pi_squared": True}
    assert load_config(with_(**wanted)).actor_rollout_ref.actor.calculate_sum_pi_squared
    with pytest.raises(ConfigError, match=r"bypass mode skips the old-policy log-prob pass"):
        load_config(with_(**wanted, **{"algorithm.rollout_correction.bypass_mode": True}))


def test_samples_per_minibatch_must_split_over_workers():
    # 1 prompt × n=3 samples = 3 samples cannot be shared by 2 workers
    with pytest.raises(ConfigError, match=r"= 3 samples per mini-batch .*trainer\.num_workers=2"):
        load_config(
            with_(
                **{
                    "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
                    "actor_rollout_ref.rollout.n": 3,
                    "data.train_batch_size": 2,
                }
            )
        )


def test_micro_batch_must_divide_per_worker_share():
    # 4 prompts × 4 samples / 2 workers = 8 samples per worker; 3 does not divide 8
    with pytest.raises(ConfigError, match=r"each worker gets 8 samples .*ppo_micro_batch_size_per_gpu=3"):
        load_config(with_(**{"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}))


def test_group_estimator_takes_one_sample_as_verl_does_but_the_group_filter_needs_several():
    # GRPO with n=1 loads (with a warning: tests/app/config/test_verl_examples.py); dropping groups whose samples all
    # score alike would drop every one-sample group
    assert load_config(with_(**{"actor_rollout_ref.rollout.n": 1})).actor_rollout_ref.rollout.n == 1
    with pytest.raises(ConfigError, match=r"filter_groups\.enable=true .*rollout\.n=1 .*must be at least 2 \(got 1\)"):
        load_config(with_(**{"actor_rollout_ref.rollout.n": 1, "algorithm.filter_groups.enable": True}))


def test_unknown_estimator_lists_known_ones():
    with pytest.raises(ConfigError, match=r"algorithm\.adv_estimator='grpoo'.*grpo"):
        load_config(with_(**{"algorithm.adv_estimator": "grpoo"}))


def test_unknown_kl_type_is_named():
    with pytest.raises(ConfigError, match=r"kl_loss_type='k9'"):
        load_config(
            with_(**{"actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.kl_loss_type": "k9"})
        )


def test_bypass_mode_refuses_truncated_sampling():
    # vLLM's log-probs under top_p < 1 are of the renormalised nucleus, not of the policy the actor computes
    bypass = {"algorithm.rollout_correction.bypass_mode": True}
    with pytest.raises(ConfigError, match=r"bypass_mode=true .*top_p=0\.9 / top_k=-1"):
        load_config(with_(**bypass, **{"actor_rollout_ref.rollout.top_p": 0.9}))
    with pytest.raises(ConfigError, match=r"bypass_mode=true .*top_p=1\.0 / top_k=20"):
        load_config(with_(**bypass, **{"actor_rollout_ref.rollout.top_k": 20}))
    assert load_config(with_(**bypass)).algorithm.rollout_correction.bypass_mode


def test_rollout_is_is_refused_with_truncated_sampling_or_a_loss_not_linear_in_the_advantage():
    token = {"algorithm.rollout_correction.rollout_is": "token"}
    with pytest.raises(ConfigError, match=r"rollout_is=token reads the sampler's log-probs.*top_p=0\.9"):
        load_config(with_(**token, **{"actor_rollout_ref.rollout.top_p": 0.9}))
    with pytest.raises(ConfigError, match=r"rollout_is=token .*loss_mode='clip_cov' is not registered as linear"):
        load_config(with_(**token, **{"actor_rollout_ref.actor.policy_loss.loss_mode": "clip_cov"}))
    with pytest.raises(ConfigError, match=r"rollout_is_threshold=0\.0 must be > 0"):
        load_config(with_(**token, **{"algorithm.rollout_correction.rollout_is_threshold": 0.0}))
    with pytest.raises(ConfigError, match=r"rollout_is: 'tokens' is not a valid 'token' \| 'sequence' or null"):
        load_config(with_(**{"algorithm.rollout_correction.rollout_is": "tokens"}))
    assert load_config(with_(**token)).algorithm.rollout_correction.rollout_is == "token"


def test_async_training_needs_a_correction_for_stale_samples_and_refuses_what_it_cannot_overlap():
    on = {"async_training.enable": True}
    with pytest.raises(ConfigError, match=r"max_staleness=1 .*set rollout_is=token .* or bypass_mode=true"):
        load_config(with_(**on))
    corrected = {**on, "algorithm.rollout_correction.rollout_is": "token"}
    with pytest.raises(ConfigError, match=r"cannot be combined with algorithm\.filter_groups\.enable=true"):
        load_config(with_(**corrected, **{"algorithm.filter_groups.enable": True}))
    with pytest.raises(ConfigError, match=r"cannot be combined with algorithm\.adv_estimator=remax"):
        load_config(with_(**corrected, **{"algorithm.adv_estimator": "remax"}))
    with pytest.raises(ConfigError, match=r"cannot be combined with trainer\.placement=colocated: vLLM sleeps"):
        load_config(
            with_(
                **corrected,
                **{"trainer.placement": "colocated", "trainer.n_gpus_per_node": 2, "trainer.num_workers": None},
            )
        )
    with pytest.raises(ConfigError, match=r"max_staleness=-1 must be >= 0"):
        load_config(with_(**corrected, **{"async_training.max_staleness": -1}))
    # verl's fully-async key means something else (a fraction of a batch): refused by name, not misread
    with pytest.raises(ConfigError, match=r"staleness_threshold"):
        load_config(with_(**corrected, **{"async_training.staleness_threshold": 0.5}))
    assert load_config(with_(**{**on, "async_training.max_staleness": 0})).async_training.enable  # synchronous
    assert load_config(with_(**corrected)).async_training.max_staleness == 1


def test_colocated_needs_gpus():
    with pytest.raises(ConfigError, match=r"trainer\.placement=colocated needs GPUs"):
        load_config(with_(**{"trainer.placement": "colocated"}))


def test_missing_model_path_says_how_to_make_one():
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.path is empty.*app\.import_model"):
        load_config(with_(**{"actor_rollout_ref.model.path": ""}))


def test_gen_batch_size_defaults_to_the_train_batch_and_needs_the_group_filter_to_differ():
    assert load_config(BASE).data.gen_batch_size == 8
    with pytest.raises(ConfigError, match=r"data\.gen_batch_size=16 differs.*algorithm\.filter_groups\.enable=true"):
        load_config(with_(**{"data.gen_batch_size": 16}))
    cfg = load_config(with_(**{"data.gen_batch_size": 16, "algorithm.filter_groups.enable": True}))
    assert cfg.data.gen_batch_size == 16


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"algorithm.adv_estimator": "gae"}, r"filter_groups\.enable=true .*adv_estimator='gae' is not one of them"),
        ({"algorithm.filter_groups.max_num_gen_batches": -1}, r"max_num_gen_batches=-1 must be >= 0"),
        (
            {"algorithm.filter_groups.max_num_gen_batches": 1, "data.gen_batch_size": 4},
            r"max_num_gen_batches=1 rounds of data\.gen_batch_size=4 prompts cannot fill data\.train_batch_size=8",
        ),
        (
            {"algorithm.filter_groups.metric": "seq_final_reward", "algorithm.use_kl_in_reward": True},
            r"metric=seq_final_reward with algorithm\.use_kl_in_reward=true",
        ),
        ({"algorithm.filter_groups.metric": "accuracy"}, r"algorithm\.filter_groups\.metric"),
    ],
)
def test_bad_group_filter_settings_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{"algorithm.filter_groups.enable": True, **overrides}))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reward_model.overlong_buffer.len": 0}, r"overlong_buffer\.len=0 must lie in \(0, 64\]"),
        ({"reward_model.overlong_buffer.len": 65}, r"overlong_buffer\.len=65 must lie in \(0, 64\]"),
        (
            {"reward_model.overlong_buffer.len": 16, "reward_model.overlong_buffer.penalty_factor": -1.0},
            r"penalty_factor=-1\.0 must be >= 0",
        ),
    ],
)
def test_bad_overlong_buffer_settings_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{"data.max_response_length": 64, "reward_model.overlong_buffer.enable": True, **overrides}))


def test_policy_loss_section_takes_verls_keys_and_the_actor_passes_them_to_the_loss():
    from algos.policy_loss_config import PolicyLossConfig

    section = {"loss_mode": "clip_cov", "clip_cov_ratio": 0.001, "clip_cov_ub": 8.0, "ppo_kl_coef": 0.0}
    cfg = load_config(with_(**{"actor_rollout_ref.actor.policy_loss": section}))
    loss_cfg = PolicyLossConfig.from_mapping(cfg.actor_rollout_ref.actor)  # as app.roles.actor.Actor builds it
    assert (loss_cfg.clip_cov_ratio, loss_cfg.clip_cov_lb, loss_cfg.clip_cov_ub) == (0.001, 1.0, 8.0)
    assert (loss_cfg.kl_cov_ratio, loss_cfg.ppo_kl_coef) == (0.0002, 0.0)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("kl_cov_ratio", -0.1, r"actor_rollout_ref\.actor\.policy_loss\.kl_cov_ratio must be in \(0, 1\].*got -0\.1"),
        ("clip_cov_ratio", 2.0, r"actor_rollout_ref\.actor\.policy_loss\.clip_cov_ratio must be in \(0, 1\].*got 2\.0"),
        ("clip_cov_lb", 6.0, r"actor_rollout_ref\.actor\.policy_loss\.clip_cov_lb=6\.0 must be below clip_cov_ub=5\.0"),
        ("ppo_kl_coef", -1.0, r"actor_rollout_ref\.actor\.policy_loss\.ppo_kl_coef must be >= 0, got -1\.0"),
    ],
)
def test_bad_policy_loss_settings_are_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{f"actor_rollout_ref.actor.policy_loss.{key}": value}))


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("clip_ratio_low", -0.1, r"actor_rollout_ref\.actor\.clip_ratio_low must be >= 0, got -0\.1"),
        ("clip_ratio", -0.2, r"actor_rollout_ref\.actor\.clip_ratio must be >= 0, got -0\.2"),
        ("clip_ratio_c", 1.0, r"actor_rollout_ref\.actor\.clip_ratio_c must be > 1 .*got 1\.0"),
    ],
)
def test_clip_ratios_are_checked_by_the_losss_one_rule(key, value, message):
    # one rule, the loss's (PolicyLossConfig): the config once had its own, stricter copy (> 0)
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{f"actor_rollout_ref.actor.{key}": value}))
    load_config(with_(**{"actor_rollout_ref.actor.clip_ratio_low": 0.0}))  # a zero range is the loss's to allow


def test_logits_chunk_size_is_sized_per_device_unless_given_and_then_must_be_positive():
    assert load_config(BASE).actor_rollout_ref.actor.logits_chunk_size is None  # app.engine.forward sizes it
    assert (
        load_config(
            with_(**{"actor_rollout_ref.actor.logits_chunk_size": 256})
        ).actor_rollout_ref.actor.logits_chunk_size
        == 256
    )
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.logits_chunk_size=0 must be a positive integer"):
        load_config(with_(**{"actor_rollout_ref.actor.logits_chunk_size": 0}))


def test_max_bad_steps_must_not_be_negative():
    assert load_config(with_(**{"trainer.max_bad_steps": 0})).trainer.max_bad_steps == 0  # 0: count, never stop
    with pytest.raises(ConfigError, match=r"trainer\.max_bad_steps=-1 must be >= 0"):
        load_config(with_(**{"trainer.max_bad_steps": -1}))


def test_a_late_lr_decay_needs_a_decaying_schedule_and_a_share_in_0_1():
    actor = "actor_rollout_ref.actor.optim"
    ok = load_config(with_(**{f"{actor}.warmup_style": "linear", f"{actor}.lr_decay_steps_ratio": 0.5}))
    assert ok.actor_rollout_ref.actor.optim.lr_decay_steps_ratio == 0.5
    with pytest.raises(ConfigError, match=r"actor\.optim\.lr_decay_steps_ratio=0\.5 times a decay, and .*constant"):
        load_config(with_(**{f"{actor}.lr_decay_steps_ratio": 0.5}))  # the default schedule is constant
    with pytest.raises(ConfigError, match=r"actor\.optim\.lr_decay_steps_ratio=1\.5 must lie in \(0, 1\]"):
        load_config(with_(**{f"{actor}.warmup_style": "cosine", f"{actor}.lr_decay_steps_ratio": 1.5}))
    with pytest.raises(ConfigError, match=r"actor\.optim\.num_cycles=0(\.0)? must be > 0"):
        load_config(with_(**{f"{actor}.warmup_style": "cosine", f"{actor}.num_cycles": 0}))
    # the critic's schedule is checked only where a critic trains
    critic = {"critic.optim.lr_decay_steps_ratio": 0.5}
    assert load_config(with_(**critic)).critic.optim.lr_decay_steps_ratio == 0.5  # GRPO: no critic
    with pytest.raises(ConfigError, match=r"critic\.optim\.lr_decay_steps_ratio=0\.5 times a decay"):
        load_config(with_(**critic, **{"algorithm.adv_estimator": "gae"}))


def test_routes_beyond_loopback_need_an_api_key(monkeypatch):
    monkeypatch.delenv("RAYRL_API_KEY", raising=False)
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.rollout\.http_host='0\.0\.0\.0' exposes the OpenAI "
        r"routes beyond this machine: set actor_rollout_ref\.rollout\.http_api_key",
    ):
        load_config(with_(**{"actor_rollout_ref.rollout.http_host": "0.0.0.0"}))
    cfg = load_config(
        with_(**{"actor_rollout_ref.rollout.http_host": "0.0.0.0", "actor_rollout_ref.rollout.http_api_key": "k"})
    )
    assert cfg.actor_rollout_ref.rollout.http_api_key == "k"


def test_restarts_need_auto_resume_and_a_sane_limit():
    assert load_config(with_(**{"trainer.max_failures": -1})).trainer.max_failures == -1  # no limit
    with pytest.raises(ConfigError, match=r"trainer\.max_failures=-2 must be >= -1"):
        load_config(with_(**{"trainer.max_failures": -2}))
    with pytest.raises(
        ConfigError,
        match=r"trainer\.max_failures=2 restarts resume from the newest checkpoint, which "
        r"needs trainer\.resume_mode=auto \(got 'disable'\)",
    ):
        load_config(with_(**{"trainer.max_failures": 2, "trainer.resume_mode": "disable"}))


def test_a_validation_only_run_needs_validation_data_and_its_validation_before_training():
    assert load_config(with_(**{"trainer.val_only": True, "data.val_files": "test.parquet"})).trainer.val_only
    with pytest.raises(ConfigError, match=r"^trainer\.val_only=true validates and stops, which needs data\.val_files"):
        load_config(with_(**{"trainer.val_only": True}))
    # verl reads val_only inside its validation before training: with that off, verl trains; refused here
    with pytest.raises(ConfigError, match=r"^trainer\.val_only=true and trainer\.val_before_train=false: .*drop one"):
        load_config(
            with_(**{"trainer.val_only": True, "data.val_files": "test.parquet", "trainer.val_before_train": False})
        )


def test_default_data_source_reaches_the_data_options():
    from app.data import PromptDataOptions

    cfg = load_config(with_(**{"data.default_data_source": "openai/gsm8k"}))
    assert PromptDataOptions.from_mapping(cfg.data).default_data_source == "openai/gsm8k"
    assert PromptDataOptions.from_mapping(load_config(with_()).data).default_data_source is None


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("algorithm.adv_estimator", "gpro", r"algorithm\.adv_estimator='gpro': unknown algorithm\.adv_estimator"),
        (
            "actor_rollout_ref.actor.loss_agg_mode",
            "token-sum",
            r"actor_rollout_ref\.actor\.loss_agg_mode: 'token-sum' "
            r"is not one of 'token-mean'",
        ),
        ("actor_rollout_ref.actor.kl_loss_type", "kl2", r"kl_loss_type='kl2' is not one of"),
        ("data.truncation", "chop", r"data\.truncation: 'chop' is not one of"),
        (
            "actor_rollout_ref.actor.strategy",
            "megatron",
            r"actor_rollout_ref\.actor\.strategy: 'megatron' is not one of",
        ),
    ],
)
def test_each_enum_names_the_key_and_the_allowed_values(key, value, message):
    overrides = {key: value}
    if key.endswith("kl_loss_type"):
        overrides["actor_rollout_ref.actor.use_kl_loss"] = True
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**overrides))


def test_self_imitation_settings_are_checked_before_anything_starts():
    on = {"actor_rollout_ref.actor.self_imitation.coef": 0.5}
    assert load_config(with_(**on)).actor_rollout_ref.actor.self_imitation.rows_per_step == 4  # the schema's
    with pytest.raises(ConfigError, match=r"self_imitation\.coef=-0\.5 must be >= 0"):
        load_config(with_(**{"actor_rollout_ref.actor.self_imitation.coef": -0.5}))
    with pytest.raises(ConfigError, match=r"self_imitation\.buffer_size=2 must be >= rows_per_step=4"):
        load_config(with_(**on, **{"actor_rollout_ref.actor.self_imitation.buffer_size": 2}))
    with pytest.raises(ConfigError, match=r"self_imitation\.rows_per_step=0 must be a positive integer"):
        load_config(with_(**on, **{"actor_rollout_ref.actor.self_imitation.rows_per_step": 0}))
    # off, its other settings are not read
    assert load_config(with_(**{"actor_rollout_ref.actor.self_imitation.buffer_size": 0}))


def test_lora_fold_dtype_needs_a_merged_lora_sync():
    merged = {"actor_rollout_ref.model.lora_rank": 8, "actor_rollout_ref.rollout.lora_sync": "merged"}
    fold = {"actor_rollout_ref.rollout.lora_fold_dtype": "bfloat16"}
    assert load_config(with_(**merged, **fold)).actor_rollout_ref.rollout.lora_fold_dtype == "bfloat16"
    with pytest.raises(ConfigError, match=r"lora_fold_dtype=bfloat16 .*rollout\.lora_sync=adapter\)"):
        load_config(with_(**fold, **{"actor_rollout_ref.model.lora_rank": 8}))
    with pytest.raises(ConfigError, match=r"lora_fold_dtype=bfloat16 .* \(actor_rollout_ref\.model\.lora_rank=0,"):
        load_config(with_(**fold, **{"actor_rollout_ref.rollout.lora_sync": "merged"}))
    with pytest.raises(ConfigError, match=r"lora_fold_dtype: 'bf16' is not a valid 'bfloat16' \| 'float16'"):
        load_config(with_(**merged, **{"actor_rollout_ref.rollout.lora_fold_dtype": "bf16"}))


@pytest.mark.parametrize("size", [0, 48])
def test_cpu_block_size_must_be_a_positive_multiple_of_32(size):
    assert load_config(BASE).actor_rollout_ref.rollout.cpu_block_size == 32
    with pytest.raises(ConfigError, match=rf"rollout\.cpu_block_size={size} must be a positive multiple of 32"):
        load_config(with_(**{"actor_rollout_ref.rollout.cpu_block_size": size}))


def test_data_sampler_takes_its_own_settings_beside_class_path_and_name():
    # verl's samplers read their settings as data_config.sampler.<name>, given as +data.sampler.<name>=...
    cfg = load_config(
        with_(**{"data.sampler": {"class_path": "s.py", "class_name": "S", "tau": 0.5, "warmup": {"steps": 2}}})
    )
    assert cfg.data.sampler.class_path == "s.py" and cfg.data.sampler.options == {"tau": 0.5, "warmup": {"steps": 2}}
    both = {"class_path": "s.py", "class_name": "S", "tau": 1, "options": {"tau": 2}}
    with pytest.raises(ConfigError, match=r"data\.sampler\.tau given twice"):
        load_config(with_(**{"data.sampler": both}))


@pytest.mark.parametrize(
    "sampler, message",
    [
        ({"class_path": "s.py"}, r"data\.sampler\.class_path=s\.py needs data\.sampler\.class_name"),
        ({"class_name": "S"}, r"data\.sampler\.class_name given without data\.sampler\.class_path"),
        ({"tau": 0.5}, r"data\.sampler\.tau given without data\.sampler\.class_path: .* data\.shuffle"),
    ],
)
def test_an_incomplete_data_sampler_is_named(sampler, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{"data.sampler": sampler}))
