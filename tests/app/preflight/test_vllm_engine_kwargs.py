"""A misspelt vLLM engine argument is named, with the nearest real one, before Ray starts."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.vllm_engine_kwargs import check_vllm_engine_kwargs_names


def _with(kwargs):
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.rollout.engine_kwargs.vllm = kwargs
    return cfg


def test_a_name_vllms_engine_args_lack_is_named_with_the_nearest():
    check_vllm_engine_kwargs_names(_with({"max_logprobs": 0}))  # an argument of vLLM's EngineArgs
    with pytest.raises(
        PreflightError,
        match=r"^actor_rollout_ref\.rollout\.engine_kwargs\.vllm\.max_logprob: vLLM \S+'s EngineArgs has no argument "
        r"max_logprob; did you mean max_logprobs\?$",
    ):
        check_vllm_engine_kwargs_names(_with({"max_logprob": 0}))


def test_without_the_key_vllm_is_not_imported(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        assert not name.startswith("vllm"), name
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    check_vllm_engine_kwargs_names(TrainerRunConfig())
