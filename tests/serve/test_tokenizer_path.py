"""model.tokenizer_path reaches the rollout engines: a model folder saved without its tokenizer serves with the
tokenizer given apart. vLLM gets it as its `tokenizer` engine argument (vLLM's own EngineArgs build the model config;
no engine starts); the transformers rollout (rollout.name=hf) reads its end-of-sequence ids from it."""

from __future__ import annotations

import asyncio

import pytest
from support import cpu_rollout_config, weights_only_copy

from serve.deployment import engine_spec_from_config
from serve.log_config import hold_vllm_import_notices
from serve.vllm_engine import engine_args


@pytest.fixture()
def weights_only_dir(vllm_tiny_model_dir, tmp_path):
    return weights_only_copy(vllm_tiny_model_dir, tmp_path / "weights-only")


def _spec(model_dir, tokenizer_path=None):
    rollout = cpu_rollout_config(dtype="float32", prompt_length=64, response_length=8)
    return engine_spec_from_config(rollout, model_dir, trust_remote_code=False, tokenizer_path=tokenizer_path)


def test_vllm_reads_the_tokenizer_from_tokenizer_path(weights_only_dir, vllm_tiny_model_dir):
    hold_vllm_import_notices()
    from vllm.engine.arg_utils import EngineArgs

    config = EngineArgs(**engine_args(_spec(weights_only_dir, vllm_tiny_model_dir), on_cpu=True)).create_model_config()
    assert (config.model, config.tokenizer) == (str(weights_only_dir), str(vllm_tiny_model_dir))
    assert EngineArgs(**engine_args(_spec(weights_only_dir), on_cpu=True)).create_model_config().tokenizer == str(
        weights_only_dir
    )


def test_the_transformers_rollout_reads_it_too(weights_only_dir, vllm_tiny_model_dir):
    from serve.hf_engine import HFRolloutEngine

    with pytest.raises(ValueError, match="tokenizer"):  # transformers finds no tokenizer files in the folder
        asyncio.run(HFRolloutEngine(_spec(weights_only_dir)).start())
    engine = HFRolloutEngine(_spec(weights_only_dir, vllm_tiny_model_dir))
    asyncio.run(engine.start())
    assert engine._eos_ids
