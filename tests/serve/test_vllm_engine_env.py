"""How a replica starts vLLM on a CPU: the environment under which it builds the engine, and the log line that drops."""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest

from serve.types import RolloutEngineSpec
from serve.vllm_engine import _ARG_UTILS_LOGGER, InProcessSeedWarning, engine_args, engine_build_env, environment


def _spec(threads: int, tensor_parallel_size: int = 1, **engine_kwargs) -> RolloutEngineSpec:
    return RolloutEngineSpec(
        model_path="m",
        tokenizer_path=None,
        dtype="bfloat16",
        tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=0.5,
        max_num_batched_tokens=2048,
        max_num_seqs=64,
        max_model_len=None,
        enforce_eager=True,
        enable_chunked_prefill=True,
        cpu_kv_cache_bytes=1 << 28,
        cpu_block_size=64,
        cpu_threads=threads,
        max_lora_rank=None,
        trust_remote_code=False,
        vllm_engine_kwargs=engine_kwargs,
        chat_template=None,
        hf_overrides={},
        enable_prefix_caching=True,
        external_libs=(),
    )


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})


def test_one_worker_runs_in_the_replica_on_its_cores(four_cores):
    # replica rank 1 with 2 threads takes the second block of two cores: 2 and 3
    assert engine_build_env(_spec(threads=2), replica_rank=1) == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": "2",
        "OMP_PLACES": "{2,3}",
        "OMP_PROC_BIND": "true",
    }


def test_tensor_parallel_workers_keep_vllms_own_processes_and_binding(four_cores):
    assert engine_build_env(_spec(threads=2, tensor_parallel_size=2), replica_rank=0) == {
        "VLLM_CPU_OMP_THREADS_BIND": "0,1"
    }


def test_the_kv_cache_is_sized_in_bytes_and_blocks_on_a_cpu_only():
    cpu = engine_args(_spec(threads=1), on_cpu=True)
    assert (cpu["kv_cache_memory_bytes"], cpu["block_size"]) == (1 << 28, 64)
    # a GPU sizes the cache by gpu_memory_utilization, in vLLM's own blocks
    gpu = engine_args(_spec(threads=1), on_cpu=False)
    assert "kv_cache_memory_bytes" not in gpu and "block_size" not in gpu
    assert gpu["gpu_memory_utilization"] == 0.5


def test_environment_restores_previous_values_and_absences(monkeypatch):
    monkeypatch.setenv("RAYRL_T_SET", "before")
    monkeypatch.delenv("RAYRL_T_UNSET", raising=False)
    with pytest.raises(RuntimeError):
        with environment({"RAYRL_T_SET": "inside", "RAYRL_T_UNSET": "inside"}):
            assert os.environ["RAYRL_T_SET"] == os.environ["RAYRL_T_UNSET"] == "inside"
            raise RuntimeError("vLLM failed to start")
    assert os.environ["RAYRL_T_SET"] == "before"
    assert "RAYRL_T_UNSET" not in os.environ


class _Captured(Exception):
    pass


def _vllms_seed_warning(monkeypatch) -> logging.LogRecord:
    """The record vLLM's `EngineArgs.create_model_config` logs first under VLLM_ENABLE_V1_MULTIPROCESSING=0; the
    capture stops the call there, before it builds anything."""
    from vllm.engine import arg_utils

    def capture(msg, *args, **kwargs):
        raise _Captured(logging.LogRecord(arg_utils.logger.name, logging.WARNING, __file__, 1, msg, args, None))

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setattr(arg_utils.logger, "warning", capture)
    with pytest.raises(_Captured) as captured:
        arg_utils.EngineArgs(model="m", seed=7).create_model_config()
    return captured.value.args[0]


def test_only_vllms_in_process_seed_warning_is_dropped(monkeypatch):
    seed = _vllms_seed_warning(monkeypatch)
    assert seed.getMessage().startswith("The global random seed is set to 7.")
    assert seed.name == _ARG_UTILS_LOGGER  # the logger the filter is attached to
    other = logging.LogRecord(
        seed.name, logging.WARNING, __file__, 1, "The global random seed is set to %d.", (7,), None
    )
    assert not InProcessSeedWarning().filter(seed)
    assert InProcessSeedWarning().filter(other)


def test_engine_kwargs_reach_vllm_and_none_replaces_an_argument_the_replica_sets():
    assert engine_args(_spec(threads=1, max_logprobs=0), on_cpu=True)["max_logprobs"] == 0
    # the config refuses these, naming the key that sets them (app.config.engine_kwargs_check); the engine too
    with pytest.raises(ValueError, match=r"engine_kwargs\.vllm\.block_size: the replica sets this engine argument"):
        engine_args(_spec(threads=1, block_size=16), on_cpu=True)
    assert engine_args(_spec(threads=1, block_size=16), on_cpu=False)["block_size"] == 16  # GPUs: vLLM's own otherwise


@pytest.mark.parametrize("on_cpu", [True, False])
def test_every_argument_the_replica_sets_is_one_the_config_refuses(on_cpu):
    from serve.types import VLLM_ARGS_FROM_CONFIG

    spec = dataclasses.replace(
        _spec(threads=1),
        max_lora_rank=16,
        max_model_len=512,
        enable_sleep_mode=not on_cpu,
        hf_overrides={"max_position_embeddings": 1024},
        tokenizer_path="/tok",
    )
    assert engine_args(spec, on_cpu).keys() <= VLLM_ARGS_FROM_CONFIG.keys()


def test_model_tokenizer_path_reaches_vllm_only_when_given():
    assert "tokenizer" not in engine_args(_spec(threads=1), on_cpu=True)  # vLLM's default: the model folder
    spec = dataclasses.replace(_spec(threads=1), tokenizer_path="/tok")
    assert engine_args(spec, on_cpu=True)["tokenizer"] == "/tok"
    assert spec.tokenizer_folder == "/tok" and _spec(threads=1).tokenizer_folder == "m"


def test_model_override_config_reaches_vllm_as_hf_overrides_only_when_given():
    assert "hf_overrides" not in engine_args(_spec(threads=1), on_cpu=True)  # vLLM's own default (None)
    spec = dataclasses.replace(_spec(threads=1), hf_overrides={"rms_norm_eps": 1e-5, "max_position_embeddings": 1024})
    assert engine_args(spec, on_cpu=True)["hf_overrides"] == {"rms_norm_eps": 1e-5, "max_position_embeddings": 1024}


def test_the_prefix_cache_follows_the_config():
    assert engine_args(_spec(threads=1), on_cpu=True)["enable_prefix_caching"] is True
    off = dataclasses.replace(_spec(threads=1), enable_prefix_caching=False)
    assert engine_args(off, on_cpu=True)["enable_prefix_caching"] is False
