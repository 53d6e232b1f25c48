"""Driver side of a training run: Ray, the rollout application, and the Ray Train `TorchTrainer` of FSDP workers."""

from __future__ import annotations

import copy
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Optional

from app.config.schema import TrainerRunConfig
from app.preflight.model_libs import model_libs

log = logging.getLogger(__name__)


def rollout_app_name(cfg: TrainerRunConfig) -> str:
    """One Serve application per run (sweep trials get their own), named so the dashboard says whose it is."""
    raw = f"rollout-{cfg.trainer.project_name}-{cfg.trainer.experiment_name}"
    return re.sub(r"[^A-Za-z0-9_-]+", "-", raw)[:100]


def ensure_ray(cfg: TrainerRunConfig) -> bool:
    """Join the cluster named by trainer.ray_address / RAY_ADDRESS (ray job submit sets it), else start a local one;
    True when it started one.

    An address must answer within seconds (a PreflightError names it and where it came from otherwise). Without one
    the run starts its own cluster even when a cluster that died without `ray stop` left its address file in Ray's
    temp folder (which a plain ray.init() would try to join). Whatever the cluster, everything the run will hold
    (app.config.placement) must fit on its nodes: a ConfigError says what is asked and what the cluster has
    otherwise, before any worker or replica is asked for. `ray_kwargs.ray_init` (verl's ray.init arguments) goes
    over the run's own (app.trainer.ray_init)."""
    import ray

    from app.config.placement import plan_resources, wants_custom_resources
    from app.preflight.cluster_address import check_cluster_answers, cluster_address
    from app.preflight.ray_init import ray_init_arguments
    from app.trainer.ray_init import joining_kwargs, local_cluster_size, starting_kwargs

    plan = plan_resources(cfg)
    user = ray_init_arguments(cfg.ray_kwargs.ray_init)  # ray_kwargs.ray_init: verl's ray.init arguments
    if ray.is_initialized():
        if user:
            log.warning(
                "ray_kwargs.ray_init (%s) left out: this process is connected to a Ray cluster already",
                ", ".join(sorted(user)),
            )
        check_cluster_fits(plan)
        return False
    given = cluster_address(cfg)
    from app.logs import quiet_env

    runtime_env = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", **quiet_env()}}
    if given:
        check_cluster_answers(cfg)
        ours = {"address": given[0], "runtime_env": runtime_env, "log_to_driver": True}
        ray.init(**joining_kwargs(ours, user, given[0]))
        check_cluster_fits(plan)
        return False
    if wants_custom_resources(cfg):
        from app.config.errors import ConfigError

        raise ConfigError(
            "trainer.worker_resources / actor_rollout_ref.rollout.replica_resources name Ray custom "
            "resources, which a local cluster started here would not have: give the cluster whose nodes "
            "declare them (`ray start --resources ...`) as trainer.ray_address or RAY_ADDRESS (ray job "
            "submit sets it)"
        )
    # The dashboard shows the run (and the rayrl_* metrics); Ray Train's placement-group cleaner also needs its state
    # API and, without it, logs a warning every few seconds for the whole run (ray_kwargs.ray_init.include_dashboard=
    # false turns it off all the same).
    # address="local": Ray's documented way to start a new cluster whatever its temp folder says is running
    ours = dict(
        address="local",
        **local_cluster_size(cfg, plan),
        runtime_env=local_runtime_env(runtime_env),
        include_dashboard=True,
        log_to_driver=True,
        _system_config=LOCAL_CLUSTER_SYSTEM_CONFIG,
    )
    held = math.ceil(plan.total().get("CPU", 0.0))  # what check_cluster_fits asks of the cluster
    ray.init(**starting_kwargs(ours, user, held))
    _exit_on_sigterm_again()
    check_cluster_fits(plan)
    return True


def cluster_nodes() -> list[dict[str, float]]:
    """The total resources of each live node of the connected Ray cluster."""
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


def check_cluster_fits(plan) -> None:
    """ConfigError unless the connected cluster can hold everything in `plan` (an app.config.placement.ResourcePlan)."""
    from app.config.placement import check_fits

    check_fits(plan, cluster_nodes())


# Ray Train's PreemptionWatcher actor (~0.1 GiB) only waits for the cluster to drain a worker's node, which a
# cluster that lives and dies with this process never does; a value the user exports wins.
LOCAL_CLUSTER_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}
# Ray prestarts workers for the first driver, with the job's runtime env, so that its first tasks start fast. A run
# starts no tasks, only actors, and in `make run` two prestarted workers idled from start to end (docs/experiments.md).
LOCAL_CLUSTER_SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


def local_runtime_env(runtime_env: dict) -> dict:
    """`runtime_env` for a cluster this run starts itself: LOCAL_CLUSTER_ENV added where the user has not set it."""
    env_vars = {name: value for name, value in LOCAL_CLUSTER_ENV.items() if name not in os.environ}
    return {**runtime_env, "env_vars": {**env_vars, **runtime_env.get("env_vars", {})}}


def _exit_on_sigterm_again() -> None:
    """ray.init installs a native SIGTERM handler that logs and aborts the driver, which then leaves the raylet's
    agents behind; put back app.train's (SystemExit through the finally blocks, then ray.shutdown at exit)."""
    import signal
    import threading

    handler = signal.getsignal(signal.SIGTERM)  # what Python last installed; the native one replaced it below Python
    if callable(handler) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


# Keys holding local paths, made absolute on the driver: Ray Train workers and Tune trials run in folders of their own.
# Data files and output folders become absolute whether they exist or not (the loader names a missing one); a model
# or tokenizer only when it exists here (otherwise it is a hub id); resume_mode when it names a checkpoint.
ABSOLUTE_PATH_KEYS = (
    "data.train_files",
    "data.val_files",
    "trainer.default_local_dir",
    "trainer.rollout_data_dir",
    "trainer.validation_data_dir",
    "custom_reward_function.path",
    "data.sampler.class_path",
    "trainer.default_hdfs_dir",
)
EXISTING_PATH_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "critic.model.path",
    "reward_model.model.path",
    "reward_model.model.input_tokenizer",
)
PATH_KEYS = (*ABSOLUTE_PATH_KEYS, *EXISTING_PATH_KEYS, "trainer.resume_mode")


def with_absolute_paths(cfg: TrainerRunConfig, cwd: Optional[Path] = None) -> TrainerRunConfig:
    """A copy whose `PATH_KEYS` are absolute, relative paths taken from `cwd` (default: the working directory)."""
    cfg = copy.deepcopy(cfg)
    base = Path.cwd() if cwd is None else Path(cwd)

    def absolute(value, only_existing=False):
        if isinstance(value, list):
            return [absolute(v, only_existing) for v in value]
        if not value or "${" in value or "://" in value:  # an interpolation, or a URI such as pkg://module
            return value
        if only_existing and not (base / Path(value).expanduser()).exists():
            return value
        return str((base / Path(value).expanduser()).resolve())

    for key in PATH_KEYS:
        *parents, leaf = key.split(".")
        section = cfg
        for part in parents:
            section = getattr(section, part)
        value = getattr(section, leaf)
        if key == "trainer.resume_mode" and value in ("auto", "disable"):
            continue
        setattr(section, leaf, absolute(value, only_existing=key in EXISTING_PATH_KEYS))
    return cfg


def worker_entry(loop_config: dict[str, Any]) -> None:
    """What each Ray Train worker runs: `loop_config["config"]` is the driver's validated `TrainerRunConfig` itself
    (dataclasses pickle), not rebuilt here."""
    from app.engine.onednn_cache import bound_primitive_cache

    bound_primitive_cache()  # before this process's first matmul, which is when oneDNN reads it
    import ray.train
    import torch

    from app.logs import quiet_train_reports
    from app.trainer.setup import build_trainer
    from serve import get_rollout_client
    from serve.model_libs import import_model_libs

    quiet_train_reports()
    cfg: TrainerRunConfig = loop_config["config"]
    for key, names in model_libs(cfg):  # the actor's, critic's and reward model's, before any of them is built
        import_model_libs(names, key)
    record_placement(Path(cfg.trainer.default_local_dir), cfg.trainer.device)
    torch.set_num_threads(max(1, int(cfg.trainer.cpus_per_worker)))
    if cfg.trainer.device == "cuda":  # the GPU Ray assigned to this rank; the engine computes on the current one
        from ray.train.torch import get_device

        torch.cuda.set_device(get_device())
    rollout = get_rollout_client(loop_config["rollout_app"], cfg.actor_rollout_ref.rollout)
    # the replicas start beside this worker's model load (train); it waits for them before its first rollout call
    trainer = build_trainer(
        cfg, rollout, report=lambda metrics: ray.train.report(metrics), rollout_ready=rollout.wait_until_running
    )
    try:
        trainer.fit()
    finally:
        if trainer.tracking is not None:  # rank 0: finish the W&B / MLflow runs and flush the files, failed or not
            trainer.tracking.close()


def record_placement(out_dir: Path, device: str) -> None:
    """placement/rank-<r>.json in the run folder: where this rank runs (node, the GPUs Ray gave it, the device it
    computes on), so a user can see how the plan was placed."""
    import json

    import ray
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    context = ray.get_runtime_context()
    folder = out_dir / "placement"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank-{rank}.json").write_text(
        json.dumps(
            {
                "rank": rank,
                "node_id": context.get_node_id(),
                "gpu_ids": context.get_accelerator_ids().get("GPU", []),
                "device": device,
            }
        )
    )


def train(
    cfg: TrainerRunConfig, rollout_app: Optional[str] = None, route_prefix: Optional[str] = "/"
) -> dict[str, float]:
    """Run the whole job; returns the last validation metrics. The config must already be validated.

    `rollout_app`: an already deployed rollout application to use (and leave running) instead of deploying one;
    the loop then pushes its own initial weights before the first rollout.
    `route_prefix`: the HTTP route of the chat-completions endpoint of the deployed application; only one
    application can hold a route, so concurrent runs (sweep trials) pass their own or None (no HTTP).
    A local cluster this call starts (no cluster joined before, no address given) is shut down when it returns.
    """
    import ray
    from ray import serve
    from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from app.config.placement import plan_resources
    from app.logs import quiet_loggers, train_log_level
    from app.trainer.progress import follow_progress
    from serve import deploy_rollout
    from serve.model_libs import lib_names

    quiet_loggers()
    started_cluster = ensure_ray(cfg)
    cfg = with_absolute_paths(cfg)
    out_dir = Path(cfg.trainer.default_local_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = plan_resources(cfg)
    app_name = rollout_app or rollout_app_name(cfg)
    if rollout_app is None:
        # the replicas start while the train workers load the model (the workers wait for them before the first
        # rollout), unless they share GPUs: the replicas must then hold theirs first (app.config.placement); or unless
        # the worker group may restart: replicas that cannot start would fail every restart, where waited for here
        # they end the run once
        model = cfg.actor_rollout_ref.model
        adapters = model.lora_rank and cfg.actor_rollout_ref.rollout.lora_sync == "adapter"
        deploy_rollout(
            cfg.actor_rollout_ref.rollout,
            model.path,
            app_name,
            trust_remote_code=model.trust_remote_code,
            tokenizer_path=model.tokenizer_path,
            max_lora_rank=model.lora_rank if adapters else None,
            seed=cfg.trainer.seed,
            route_prefix=route_prefix,
            placement=replica_placement(cfg, plan),
            chat_template=model.custom_chat_template,
            hf_overrides=model.override_config,
            external_libs=lib_names(model.external_lib),
            wait=plan.rollout_starts_first or cfg.trainer.max_failures != 0,
        )
    [worker] = plan.train.bundles
    trainer = TorchTrainer(
        worker_entry,
        train_loop_config={"config": cfg, "rollout_app": app_name},
        torch_config=TorchConfig(backend="nccl" if cfg.trainer.device == "cuda" else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=cfg.trainer.num_workers, use_gpu="GPU" in worker, resources_per_worker=dict(worker)
        ),
        run_config=RunConfig(
            name=f"{cfg.trainer.project_name}-{cfg.trainer.experiment_name}",
            storage_path=str(out_dir / "ray_train"),
            # a restarted worker group runs worker_entry again, which resumes from the newest
            # checkpoint
            failure_config=FailureConfig(max_failures=cfg.trainer.max_failures),
            logging_config=LoggingConfig(log_level=train_log_level()),
        ),
    )
    try:
        with follow_progress(out_dir):
            trainer.fit()
        if cfg.ray_kwargs.timeline_json_file:  # as verl: the run's tasks and actors as a Chrome trace
            ray.timeline(filename=cfg.ray_kwargs.timeline_json_file)
    finally:
        if started_cluster:  # the replicas end with the cluster; deleting the application first took seconds
            ray.shutdown()
        elif rollout_app is None:
            serve.delete(app_name)
    return _final_validation(out_dir, cfg.trainer.val_only)


def replica_placement(cfg: TrainerRunConfig, plan):
    """The plan's rollout share in serve/'s terms: each replica's bundles, its vLLM workers, and sleep mode."""
    from serve import ReplicaPlacement

    sleeps = (
        cfg.trainer.placement == "colocated"
        and cfg.actor_rollout_ref.rollout.free_cache_engine
        and cfg.trainer.device == "cuda"
    )
    return ReplicaPlacement(
        plan.rollout.bundles, plan.engine_tensor_parallel_size, plan.replica_engine_env(), enable_sleep_mode=sleeps
    )


def _final_validation(out_dir: Path, val_only: bool = False) -> dict[str, float]:
    history = validation_history(out_dir, val_only)
    return {k: v for k, v in history[-1][1].items() if k.startswith("val-core/")} if history else {}


def validation_history(out_dir: Path, val_only: bool = False) -> list[tuple[int, dict[str, float]]]:
    """(step, validation metrics) of each validation of a run that logged `val-core/reward/mean`, for the before/after
    summary; `val_only`: the latest validation-only run's one validation."""
    from app.trainer.tracking import read_jsonl, record_path

    rows = [
        (int(r["step"]), {k: v for k, v in r.items() if k.startswith("val-")})
        for r in read_jsonl(record_path(out_dir, val_only))
        if "val-core/reward/mean" in r
    ]
    return rows[-1:] if val_only else sorted(rows, key=lambda row: row[0])
