"""GPU layouts worked out from the config alone: the device, colocated or split placement, the replicas, vLLM's memory
settings, what each process holds, and whether a cluster can hold it all. No Ray here."""

import pytest
from support import with_dotted

from app.config import ConfigError, load_config
from app.config.placement import ROLLOUT_GPU_SHARE, TRAIN_GPU_SHARE, check_fits, described_cluster, plan_resources

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 8},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 8}},
    "algorithm": {"adv_estimator": "grpo"},
}
TP = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def gpu_cfg(gpus=4, tp=2, **overrides):
    return load_config(with_dotted(BASE, **{"trainer.n_gpus_per_node": gpus, TP: tp, **overrides}))


def test_a_verl_gpu_layout_is_colocated_with_one_replica_per_tp_group():
    cfg = gpu_cfg(gpus=4, tp=2)
    t, r = cfg.trainer, cfg.actor_rollout_ref.rollout
    assert (t.device, t.placement, t.num_workers) == ("cuda", "colocated", 4)
    assert r.replicas == 2  # 4 training GPUs / 2 per replica, as verl's rollout data-parallel size
    assert (r.gpu_memory_utilization, r.enforce_eager) == (0.5, True)  # vLLM shares the GPU with the trainer


def test_the_device_comes_from_the_config_not_from_the_machine():
    cpu = load_config(with_dotted(BASE))
    assert (cpu.trainer.device, cpu.trainer.placement, cpu.actor_rollout_ref.rollout.replicas) == ("cpu", "split", 1)
    assert cpu.actor_rollout_ref.rollout.enforce_eager is True
    # a GPU layout computed on the CPU: the same layout, CPU precision
    simulated = gpu_cfg(**{"trainer.device": "cpu"})
    assert (simulated.trainer.placement, simulated.actor_rollout_ref.rollout.replicas) == ("colocated", 2)
    assert (
        simulated.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype
        == cpu.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype
    )
    with pytest.raises(ConfigError, match=r"trainer\.device=cuda with trainer\.n_gpus_per_node=0"):
        load_config(with_dotted(BASE, **{"trainer.device": "cuda"}))


def test_split_on_gpus_gives_vllm_its_own_gpus_and_settings_that_suit_them():
    cfg = gpu_cfg(**{"trainer.placement": "split"})
    r = cfg.actor_rollout_ref.rollout
    assert (r.replicas, r.gpu_memory_utilization, r.enforce_eager) == (1, 0.9, False)
    # what the user sets wins
    mine = gpu_cfg(
        **{
            "trainer.placement": "split",
            "actor_rollout_ref.rollout.gpu_memory_utilization": 0.7,
            "actor_rollout_ref.rollout.enforce_eager": True,
        }
    )
    assert (mine.actor_rollout_ref.rollout.gpu_memory_utilization, mine.actor_rollout_ref.rollout.enforce_eager) == (
        0.7,
        True,
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {TP: 2},
            r"tensor_model_parallel_size=2 needs GPUs \(trainer\.n_gpus_per_node > 0\).*raise "
            r"actor_rollout_ref\.rollout\.replicas",
        ),
        ({"trainer.placement": "colocated"}, r"trainer\.placement=colocated needs GPUs"),
    ],
)
def test_cpu_runs_refuse_what_needs_gpus(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_dotted(BASE, **overrides))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({TP: 3}, r"shares the 4 training GPUs .* 4 is not a multiple of 3"),
        (
            {"actor_rollout_ref.rollout.replicas": 1},
            r"replicas=1 x tensor_model_parallel_size=2 = 2 GPUs, but .* each of the 4 training GPUs: leave "
            r"actor_rollout_ref\.rollout\.replicas unset \(2\)",
        ),
        ({TP: 8}, r"tensor_model_parallel_size=8 is more than trainer\.n_gpus_per_node=4: one replica's"),
    ],
)
def test_colocated_layouts_that_cannot_share_the_gpus_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        gpu_cfg(**overrides)


def test_colocated_plan_gives_each_gpu_one_rank_and_one_vllm_worker():
    plan = plan_resources(gpu_cfg(gpus=4, tp=2))
    assert plan.train.count == 4 and plan.train.bundles == ({"CPU": 1.0, "GPU": TRAIN_GPU_SHARE},)
    # the replica's own actor, then one bundle per tensor-parallel vLLM worker
    assert plan.rollout.count == 2
    assert plan.rollout.bundles == ({"CPU": 1.0}, {"GPU": ROLLOUT_GPU_SHARE}, {"GPU": ROLLOUT_GPU_SHARE})
    assert plan.total() == pytest.approx({"CPU": 6.0, "GPU": 4.0})
    assert plan.engine_tensor_parallel_size == 2
    assert plan.replica_engine_env() == {"VLLM_RAY_PER_WORKER_GPUS": "0.51", "VLLM_RAY_BUNDLE_INDICES": "1,2"}
    # shares above and below one half: two vLLM workers never fit on one GPU, nor two ranks
    assert ROLLOUT_GPU_SHARE > 0.5 > TRAIN_GPU_SHARE and ROLLOUT_GPU_SHARE + TRAIN_GPU_SHARE == pytest.approx(1.0)
    check_fits(plan, described_cluster(1, 8, 4))


def test_only_replicas_that_share_gpus_with_the_trainer_start_before_it():
    # colocated GPUs, real or simulated: the replicas take their shares first (app.config.placement)
    assert plan_resources(gpu_cfg(gpus=4, tp=2)).rollout_starts_first
    assert plan_resources(gpu_cfg(gpus=4, tp=2, **{"trainer.device": "cpu"})).rollout_starts_first
    # GPUs of their own, or none: replicas and train workers start side by side
    split = gpu_cfg(gpus=4, tp=2, **{"trainer.placement": "split", "actor_rollout_ref.rollout.replicas": 2})
    assert not plan_resources(split).rollout_starts_first
    assert not plan_resources(load_config(with_dotted(BASE))).rollout_starts_first


def test_simulated_gpus_keep_the_gpu_plan_but_run_one_vllm_worker():
    plan = plan_resources(gpu_cfg(gpus=4, tp=2, **{"trainer.device": "cpu"}))
    assert plan.total() == pytest.approx({"CPU": 6.0, "GPU": 4.0})
    assert plan.engine_tensor_parallel_size == 1 and plan.replica_engine_env() == {}


def test_tp1_replica_holds_its_gpu_share_itself():
    plan = plan_resources(gpu_cfg(gpus=2, tp=1))
    assert plan.rollout.count == 2 and plan.rollout.bundles == ({"CPU": 1.0, "GPU": ROLLOUT_GPU_SHARE},)
    check_fits(plan, described_cluster(1, 4, 2))


def test_a_layout_on_fewer_gpus_than_it_needs_is_refused_naming_the_numbers():
    plan = plan_resources(gpu_cfg(gpus=4, tp=2))
    with pytest.raises(
        ConfigError,
        match=r"the run needs 6 CPU, 4 GPU \(2 rollout replicas of \{1 CPU\} \+ \{0\.51 "
        r"GPU\} \+ \{0\.51 GPU\} and 4 train workers of \{1 CPU, 0\.49 GPU\}\), but "
        r"the Ray cluster has 8 CPU, 2 GPU: GPU is short by 2; "
        r"give the run more GPUs",
    ):
        check_fits(plan, described_cluster(1, 8, 2))


def test_split_needs_the_extra_gpus_and_places_with_them():
    plan = plan_resources(
        gpu_cfg(gpus=4, tp=2, **{"trainer.placement": "split", "actor_rollout_ref.rollout.replicas": 2})
    )
    assert plan.total() == pytest.approx({"CPU": 6.0, "GPU": 8.0})
    check_fits(plan, described_cluster(2, 8, 4))  # 4 training GPUs, 4 for two replicas of TP 2
    with pytest.raises(
        ConfigError,
        match=r"needs 6 CPU, 8 GPU .* has 8 CPU, 4 GPU: GPU is short by 4.*split needs "
        r"rollout\.replicas x tensor_model_parallel_size GPUs",
    ):
        check_fits(plan, described_cluster(1, 8, 4))


def test_a_replica_must_fit_on_one_node():
    # 4 GPUs in total, as many as asked, but a TP-2 replica needs two GPUs of one node
    plan = plan_resources(
        gpu_cfg(gpus=2, tp=2, **{"trainer.placement": "split", "actor_rollout_ref.rollout.replicas": 1})
    )
    assert plan.total()["GPU"] == 4
    with pytest.raises(
        ConfigError,
        match=r"rollout replica 1 of 1 .*tensor_model_parallel_size=2.* fits on no node "
        r"of the Ray cluster \(4 nodes: 4 CPU, 1 GPU; ",
    ):
        check_fits(plan, described_cluster(4, 4, 1))
    check_fits(plan, described_cluster(2, 4, 2))


def test_layers_compile_by_default_where_the_trainer_computes_on_cuda_with_fsdp():
    def compiled(cfg):
        return cfg.actor_rollout_ref.actor.use_torch_compile, cfg.critic.use_torch_compile

    assert compiled(load_config(with_dotted(BASE))) == (False, False)  # CPU: compiling costs more than it gains
    assert compiled(gpu_cfg()) == (True, True)  # as verl's default
    assert compiled(gpu_cfg(**{"trainer.device": "cpu"})) == (False, False)  # a GPU layout computed on the CPU
    # where compiled layers are not built (DeepSpeed) or not checked (sequence parallelism), the default is eager and
    # the config loads; an explicit true there is refused by those checks (test_deepspeed_config, test_verl_examples)
    assert compiled(gpu_cfg(**{"actor_rollout_ref.actor.strategy": "deepspeed"})) == (False, True)
    assert compiled(gpu_cfg(**{"critic.ulysses_sequence_parallel_size": 2})) == (True, False)
    assert compiled(gpu_cfg(**{"actor_rollout_ref.actor.use_torch_compile": False})) == (False, True)  # explicit stays
