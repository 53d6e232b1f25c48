"""`actor_rollout_ref.rollout.engine_kwargs.vllm`: any other vLLM engine argument is accepted, one the replica sets
from another key is refused naming that key (on GPUs the CPU backend's cache arguments are free)."""

import pytest
from support import with_dotted

from app.config import ConfigError, load_config

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 8},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}, "rollout": {"n": 4}},
}
KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def test_other_engine_arguments_are_taken_as_given():
    cfg = load_config(with_dotted(BASE, **{KWARGS: {"max_logprobs": 0, "kv_cache_dtype": "fp8"}}))
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm == {"max_logprobs": 0, "kv_cache_dtype": "fp8"}


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("max_num_seqs", 64, r"actor_rollout_ref\.rollout\.max_num_seqs sets it"),
        ("seed", 3, r"trainer\.seed sets it"),
        ("block_size", 16, r"actor_rollout_ref\.rollout\.cpu_block_size sets it on CPUs"),
        ("enable_prefix_caching", False, r"actor_rollout_ref\.rollout\.enable_prefix_caching sets it"),
    ],
)
def test_an_argument_the_replica_sets_is_refused_naming_what_sets_it(name, value, says):
    with pytest.raises(
        ConfigError, match=rf"^{KWARGS}\.{name}={value!r}: the replica sets this vLLM argument itself; {says}"
    ):
        load_config(with_dotted(BASE, **{KWARGS: {name: value}}))


def test_a_gpu_run_may_size_vllms_blocks_and_the_hf_engine_takes_no_vllm_arguments():
    gpu = {"trainer.n_gpus_per_node": 1, "trainer.nnodes": 1, KWARGS: {"block_size": 32}}
    assert load_config(with_dotted(BASE, **gpu)).actor_rollout_ref.rollout.engine_kwargs.vllm == {"block_size": 32}
    with pytest.raises(ConfigError, match=rf"^{KWARGS}=.*rollout\.name=hf generates with transformers, not vLLM"):
        load_config(with_dotted(BASE, **{"actor_rollout_ref.rollout.name": "hf", KWARGS: {"max_logprobs": 0}}))
