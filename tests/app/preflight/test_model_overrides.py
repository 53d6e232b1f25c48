"""model.override_config names fields of the model's config (a misspelt one is named, with the nearest, before Ray
starts), and the context-length check reads the overridden positions."""

import pytest
from transformers import LlamaConfig, PretrainedConfig

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.context_length import check_context_length
from app.preflight.model_overrides import check_model_overrides


def _cfg(model_dir, overrides, estimator="grpo", critic_overrides=None):
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.model.path = cfg.critic.model.path = model_dir
    cfg.actor_rollout_ref.model.override_config = overrides
    cfg.critic.model.override_config = critic_overrides or {}
    cfg.algorithm.adv_estimator = estimator
    return cfg


def test_fields_of_the_config_and_its_aliases_pass(model_dir):
    check_model_overrides(
        _cfg(model_dir, {"max_position_embeddings": 4096, "attention_dropout": 0.1, "rms_norm_eps": 1e-5})
    )


def test_a_name_the_config_lacks_is_named_with_the_nearest(model_dir):
    with pytest.raises(
        PreflightError,
        match=r"^actor_rollout_ref\.model\.override_config\.max_position_embedding: the LlamaConfig of .* has no field "
        r"max_position_embedding; did you mean max_position_embeddings\?",
    ):
        check_model_overrides(_cfg(model_dir, {"max_position_embedding": 4096}))


def test_the_critics_overrides_are_checked_where_a_critic_runs(model_dir):
    check_model_overrides(_cfg(model_dir, {}, critic_overrides={"no_such_field": 1}))  # GRPO: no critic
    with pytest.raises(PreflightError, match=r"^critic\.model\.override_config\.no_such_field: the LlamaConfig"):
        check_model_overrides(_cfg(model_dir, {}, estimator="gae", critic_overrides={"no_such_field": 1}))


def test_a_nested_config_is_refused_because_it_would_be_replaced(model_dir, monkeypatch):
    class Composite(PretrainedConfig):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.text_config = LlamaConfig(vocab_size=64, hidden_size=16, num_attention_heads=2)

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", lambda *a, **k: Composite())
    with pytest.raises(
        PreflightError, match=r"^actor_rollout_ref\.model\.override_config\.text_config: text_config is a nested config"
    ):
        check_model_overrides(_cfg(model_dir, {"text_config": {"max_position_embeddings": 4096}}))


def test_the_context_length_check_reads_the_overridden_positions(model_dir):
    cfg = _cfg(model_dir, {})
    cfg.actor_rollout_ref.rollout.prompt_length, cfg.actor_rollout_ref.rollout.response_length = 100, 100
    with pytest.raises(
        PreflightError, match=r"= 200 tokens, more than the 128 positions of actor_rollout_ref\.model\.path"
    ):
        check_context_length(cfg)
    cfg.actor_rollout_ref.model.override_config = {"max_position_embeddings": 256}
    check_context_length(cfg)  # the override makes room, as it does for the engines and vLLM
    cfg.actor_rollout_ref.model.override_config = {"max_position_embeddings": 150}
    with pytest.raises(
        PreflightError, match=r"more than the 150 positions of actor_rollout_ref\.model\.override_config; lower"
    ):
        check_context_length(cfg)
