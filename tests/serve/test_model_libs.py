"""model.external_lib in the replica: the modules are imported before the engine builds the model, so a model type
only they register loads; a module that cannot be imported is named with the key."""

from __future__ import annotations

import asyncio

import pytest

from serve.model_libs import import_model_libs, lib_names


def test_a_value_is_none_one_name_or_a_list():
    assert lib_names(None) == () and lib_names("") == ()
    assert lib_names("a.b") == ("a.b",)
    assert lib_names(["a", "b"]) == ("a", "b")


def test_a_module_that_cannot_be_imported_is_named_with_the_key():
    with pytest.raises(ImportError, match=r"^critic\.model\.external_lib: cannot import 'no_such_lib_x' .*every node"):
        import_model_libs(["no_such_lib_x"], "critic.model.external_lib")


def test_the_replicas_engine_builds_a_model_type_only_the_lib_registers(marked_model_dir):
    from support import cpu_rollout_config

    from serve.deployment import engine_spec_from_config, make_rollout_engine

    rollout = cpu_rollout_config(dtype="float32", prompt_length=64, response_length=8)
    spec = engine_spec_from_config(rollout, marked_model_dir, trust_remote_code=False, external_libs=["marked_llama"])
    assert spec.external_libs == ("marked_llama",)
    engine = make_rollout_engine("hf", spec, replica_rank=0)
    asyncio.run(engine.start())
    assert type(engine._model).__name__ == "MarkedLlamaForCausalLM"  # the lib's class, found by its model type
