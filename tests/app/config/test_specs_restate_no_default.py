"""Every default is written once, in the typed schema (app/config/schema.py). The small specs that code below the config
builds from it give no default to a field that is a config key, and their builders pass every such key: built from a
config left at the schema's defaults, each holds exactly the config's values. A builder that forgets a key fails with a
TypeError; one that reads the wrong key, or the wrong section, fails the comparison.

The maps spec field -> config key are kept by hand. A field added to a spec without a default fails the first test
until it is mapped here to the key it mirrors.
"""

import dataclasses
from dataclasses import MISSING

import pytest

from algos.policy_loss_config import PolicyLossConfig
from app.config import load_config
from app.data import PromptDataOptions
from app.engine import DeepSpeedSpec, EngineSpec, OptimSpec
from app.roles.factory import actor_engine_spec, critic_engine_spec, ref_engine_spec
from serve.deployment import engine_spec_from_config
from serve.types import RolloutEngineSpec

ARR = "actor_rollout_ref"
MODEL, ACTOR, ROLLOUT = f"{ARR}.model", f"{ARR}.actor", f"{ARR}.rollout"


def _same_names(section: str, *names: str) -> dict[str, str]:
    return {name: f"{section}.{name}" for name in names}


def _loaded(model: str, fsdp: str) -> dict[str, str]:
    """What every trainer engine reads from its model section and its fsdp_config."""
    return {
        "model_path": f"{model}.path",
        "model_overrides": f"{model}.override_config",
        **_same_names(model, "trust_remote_code", "use_remove_padding", "share_prompt_prefix"),
        **_same_names(fsdp, "model_dtype", "param_offload", "optimizer_offload", "fsdp_size", "reshard_after_forward"),
        **_same_names(f"{fsdp}.mixed_precision", "param_dtype", "reduce_dtype", "buffer_dtype"),
    }


def _trained(model: str, role: str) -> dict[str, str]:
    """What a trained engine (actor, critic) reads from its role section."""
    return {
        **_same_names(model, "enable_gradient_checkpointing"),
        **_same_names(role, "grad_clip", "use_dynamic_bsz"),
        "micro_batch_size_per_gpu": f"{role}.ppo_micro_batch_size_per_gpu",
        "max_token_len_per_gpu": f"{role}.ppo_max_token_len_per_gpu",
        "compile_layers": f"{role}.use_torch_compile",
        **_same_names(role, "ulysses_sequence_parallel_size"),
    }


OPTIM = _same_names(
    "optim",
    "lr",
    "weight_decay",
    "betas",
    "lr_warmup_steps",
    "lr_warmup_steps_ratio",
    "warmup_style",
    "min_lr_ratio",
    "lr_decay_steps_ratio",
    "num_cycles",
    "total_training_steps",
)  # under the role's section
# under the role's section
DEEPSPEED = _same_names("deepspeed_config", "zero_stage", "offload_optimizer", "config_path")
ACTOR_ENGINE = {
    **_loaded(MODEL, f"{ACTOR}.fsdp_config"),
    **_trained(MODEL, ACTOR),
    **_same_names(MODEL, "lora_rank", "lora_alpha", "target_modules", "exclude_modules"),
    **_same_names(ACTOR, "logits_chunk_size"),
}
CRITIC_ENGINE = {
    **_loaded("critic.model", "critic.model.fsdp_config"),
    **_trained("critic.model", "critic"),
    **_same_names("critic.model", "lora_rank", "lora_alpha", "target_modules"),
}
REF_ENGINE = {
    **_loaded(MODEL, f"{ARR}.ref.fsdp_config"),
    "micro_batch_size_per_gpu": f"{ARR}.ref.log_prob_micro_batch_size_per_gpu",
    **_same_names(ACTOR, "use_dynamic_bsz", "logits_chunk_size"),
    "max_token_len_per_gpu": f"{ACTOR}.ppo_max_token_len_per_gpu",
    "compile_layers": f"{ACTOR}.use_torch_compile",
    "ulysses_sequence_parallel_size": f"{ARR}.ref.ulysses_sequence_parallel_size",
}
ROLLOUT_ENGINE = {
    "model_path": f"{MODEL}.path",
    "tokenizer_path": f"{MODEL}.tokenizer_path",
    "trust_remote_code": f"{MODEL}.trust_remote_code",
    "tensor_parallel_size": f"{ROLLOUT}.tensor_model_parallel_size",
    "vllm_engine_kwargs": f"{ROLLOUT}.engine_kwargs.vllm",
    "chat_template": f"{MODEL}.custom_chat_template",
    "hf_overrides": f"{MODEL}.override_config",
    **_same_names(
        ROLLOUT,
        "dtype",
        "gpu_memory_utilization",
        "max_num_batched_tokens",
        "max_num_seqs",
        "enforce_eager",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "cpu_block_size",
    ),
}
# rollout keys the builder converts (or derives from model.lora_rank): checked one by one below
ROLLOUT_CONVERTED = {"max_model_len", "cpu_kv_cache_bytes", "cpu_threads", "max_lora_rank", "external_libs"}
PROMPT_DATA = _same_names(
    "data",
    "prompt_key",
    "system_prompt",
    "ground_truth_key",
    "reward_fn_key",
    "default_data_source",
    "max_prompt_length",
    "filter_overlong_prompts",
    "apply_chat_template_kwargs",
    "truncation",
)
POLICY_LOSS = {
    **_same_names(ACTOR, "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c"),
    **_same_names(
        f"{ACTOR}.policy_loss", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef"
    ),
}


def _without_default(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.default is MISSING and f.default_factory is MISSING}


@pytest.mark.parametrize(
    "cls, config_keys",
    [
        (OptimSpec, set(OPTIM)),
        (DeepSpeedSpec, set(DEEPSPEED) | {"train_batch_size"}),  # train_batch_size: ppo_mini_batch_size x rollout.n
        (EngineSpec, set(ACTOR_ENGINE) | {"optim"}),  # optim: the role's optim section (None: an inference-only engine)
        (RolloutEngineSpec, set(ROLLOUT_ENGINE) | ROLLOUT_CONVERTED),
        (PromptDataOptions, set(PROMPT_DATA)),
        (PolicyLossConfig, set(POLICY_LOSS)),
    ],
    ids=lambda x: x.__qualname__ if isinstance(x, type) else "",
)
def test_the_fields_that_are_config_keys_and_only_they_have_no_default(cls, config_keys):
    assert _without_default(cls) == config_keys


@pytest.fixture(scope="module")
def cfg():
    # the schema's defaults plus the two keys a run must give, validated as a run's config is (`auto` dtypes resolved,
    # the critic's model path and the rollout's lengths filled in)
    return load_config({"data": {"train_files": "train.parquet"}, "actor_rollout_ref": {"model": {"path": "/m"}}})


def _value(cfg, key: str):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _assert_mirrors(spec, fields: dict[str, str], cfg) -> None:
    def plain(value):
        return list(value) if isinstance(value, tuple) else value  # betas: a tuple in OptimSpec, a list in the schema

    assert {f: plain(getattr(spec, f)) for f in fields} == {f: plain(_value(cfg, key)) for f, key in fields.items()}


def test_trainer_engine_specs_hold_the_configs_values(cfg):
    arr = cfg.actor_rollout_ref
    actor = actor_engine_spec(arr.model, arr.actor, seed=0, rollout_n=arr.rollout.n)
    _assert_mirrors(actor, ACTOR_ENGINE, cfg)
    _assert_mirrors(actor.optim, {f: f"{ACTOR}.{key}" for f, key in OPTIM.items()}, cfg)
    _assert_mirrors(actor.deepspeed, {f: f"{ACTOR}.{key}" for f, key in DEEPSPEED.items()}, cfg)
    assert actor.deepspeed.train_batch_size == arr.actor.ppo_mini_batch_size * arr.rollout.n
    critic = critic_engine_spec(cfg.critic, seed=0, rollout_n=arr.rollout.n)
    _assert_mirrors(critic, CRITIC_ENGINE, cfg)
    _assert_mirrors(critic.optim, {f: f"critic.{key}" for f, key in OPTIM.items()}, cfg)
    _assert_mirrors(critic.deepspeed, {f: f"critic.{key}" for f, key in DEEPSPEED.items()}, cfg)
    reference = ref_engine_spec(arr.model, arr.ref, arr.actor)
    _assert_mirrors(reference, REF_ENGINE, cfg)
    assert reference.optim is None and critic.lora_rank == reference.lora_rank == 0


def test_data_options_and_policy_loss_config_hold_the_configs_values(cfg):
    _assert_mirrors(PromptDataOptions.from_mapping(cfg.data), PROMPT_DATA, cfg)
    _assert_mirrors(PolicyLossConfig.from_mapping(cfg.actor_rollout_ref.actor), POLICY_LOSS, cfg)


def test_rollout_engine_spec_holds_the_configs_values(cfg):
    model, rollout = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.rollout
    spec = engine_spec_from_config(
        rollout,
        model.path,
        trust_remote_code=model.trust_remote_code,
        tokenizer_path=model.tokenizer_path,
        chat_template=model.custom_chat_template,
        hf_overrides=model.override_config,
    )
    _assert_mirrors(spec, ROLLOUT_ENGINE, cfg)
    assert rollout.max_model_len is None and spec.max_model_len == rollout.prompt_length + rollout.response_length
    assert spec.cpu_kv_cache_bytes == rollout.cpu_kv_cache_gib * 2**30
    assert rollout.omp_threads is None and spec.cpu_threads == rollout.cpus_per_replica
    assert spec.max_lora_rank is None  # LoRA off unless the launcher passes model.lora_rank
    capped = engine_spec_from_config(
        dataclasses.replace(rollout, max_model_len=4096), model.path, trust_remote_code=model.trust_remote_code
    )
    assert capped.max_model_len == 4096
