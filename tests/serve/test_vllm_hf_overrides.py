"""model.override_config reaches the rollout engines. vLLM gets it through the replica's engine arguments: its fields
read as overridden, and a max_model_len beyond the folder's positions is accepted only with the override that makes
room (vLLM's own EngineArgs build the config; no engine starts). The transformers rollout (rollout.name=hf) sets it
on the model's config."""

from __future__ import annotations

import json

import pytest

from serve.log_config import hold_vllm_import_notices
from serve.vllm_engine import engine_args


@pytest.fixture(scope="module")
def model_config_of(vllm_tiny_model_dir):
    from support import cpu_rollout_config

    from serve.deployment import engine_spec_from_config

    hold_vllm_import_notices()
    from vllm.engine.arg_utils import EngineArgs

    def build(hf_overrides=None, max_model_len=None):
        rollout = cpu_rollout_config(dtype="float32", prompt_length=64, response_length=8, max_model_len=max_model_len)
        spec = engine_spec_from_config(rollout, vllm_tiny_model_dir, trust_remote_code=False, hf_overrides=hf_overrides)
        return EngineArgs(**engine_args(spec, on_cpu=True)).create_model_config()

    return build


def test_the_overridden_fields_are_what_vllm_reads(model_config_of, vllm_tiny_model_dir):
    positions = json.loads((vllm_tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    assert model_config_of().hf_config.rms_norm_eps != 0.5
    config = model_config_of(hf_overrides={"rms_norm_eps": 0.5, "max_position_embeddings": 4 * positions})
    assert (config.hf_config.rms_norm_eps, config.hf_config.max_position_embeddings) == (0.5, 4 * positions)
    longer = model_config_of(hf_overrides={"max_position_embeddings": 4 * positions}, max_model_len=2 * positions)
    assert longer.max_model_len == 2 * positions
    with pytest.raises(Exception, match="max_model_len"):  # without the override vLLM refuses the longer context
        model_config_of(max_model_len=2 * positions)


def test_the_transformers_rollout_sets_them_too(vllm_tiny_model_dir):
    import asyncio

    from support import cpu_rollout_config

    from serve.deployment import engine_spec_from_config
    from serve.hf_engine import HFRolloutEngine

    rollout = cpu_rollout_config(dtype="float32", prompt_length=64, response_length=8)
    spec = engine_spec_from_config(
        rollout, vllm_tiny_model_dir, trust_remote_code=False, hf_overrides={"rms_norm_eps": 0.5}
    )
    engine = HFRolloutEngine(spec)
    asyncio.run(engine.start())
    assert engine._model.config.rms_norm_eps == 0.5
