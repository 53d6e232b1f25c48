"""app.trainer.launch.ensure_ray: a cluster the run starts itself leaves out Ray Train's PreemptionWatcher actor (a
node of a local cluster is never drained), unless the user's environment says otherwise; a joined cluster is left as
its owner configured it."""

import functools

import pytest
from support import with_dotted

from app.config import load_config

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 4},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}},
    "algorithm": {"adv_estimator": "grpo"},
}
WATCHER = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


@pytest.fixture
def init_calls(monkeypatch):
    """ray.init recorded, not run: the kwargs of each call."""
    import ray

    calls = []

    @functools.wraps(ray.init)  # ray.init's signature, which the names in ray_kwargs.ray_init are checked against
    def record(*args, **kwargs):
        calls.append(kwargs)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", record)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 8.0}}])
    return calls


def test_a_local_cluster_turns_the_preemption_watcher_off_and_keeps_the_tokenizer_setting(monkeypatch, init_calls):
    from app.trainer.launch import ensure_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(WATCHER, raising=False)
    assert ensure_ray(load_config(with_dotted(BASE))) is True  # started here: launch.train shuts it down
    (kwargs,) = init_calls
    from app.logs import quiet_env

    assert kwargs["runtime_env"]["env_vars"] == {WATCHER: "0", "TOKENIZERS_PARALLELISM": "false", **quiet_env()}
    assert kwargs["address"] == "local"  # a new cluster, whatever Ray's temp folder names (test_ensure_ray_address)
    assert kwargs["_system_config"] == {"prestart_worker_first_driver": False}


def test_a_watcher_setting_the_user_exports_wins(monkeypatch, init_calls):
    from app.trainer.launch import ensure_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv(WATCHER, "1")
    ensure_ray(load_config(with_dotted(BASE)))
    # not in the runtime env: the workers inherit the user's own value from the environment
    assert WATCHER not in init_calls[0]["runtime_env"]["env_vars"]


def test_a_joined_cluster_keeps_its_watcher(monkeypatch, init_calls):
    import socket

    from app.trainer.launch import ensure_ray

    monkeypatch.delenv(WATCHER, raising=False)
    with socket.socket() as head:  # the address must answer (ensure_ray checks before joining)
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert ensure_ray(load_config(with_dotted(BASE))) is False  # someone else's: launch.train leaves it running
    (kwargs,) = init_calls
    assert kwargs["address"] == address
    assert "_system_config" not in kwargs  # a joined cluster's raylets were configured by whoever started them
    from app.logs import quiet_env

    assert kwargs["runtime_env"]["env_vars"] == {"TOKENIZERS_PARALLELISM": "false", **quiet_env()}


def test_the_users_ray_init_goes_over_the_runs_own(monkeypatch, init_calls):
    from app.trainer.launch import ensure_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(WATCHER, raising=False)
    user = {"num_cpus": 16, "include_dashboard": False, "runtime_env": {"env_vars": {"JUDGE_URL": "http://j"}}}
    ensure_ray(load_config(with_dotted({**BASE, "ray_kwargs": {"ray_init": user}})))
    (kwargs,) = init_calls
    assert kwargs["num_cpus"] == 16 and kwargs["include_dashboard"] is False
    assert kwargs["runtime_env"]["env_vars"]["JUDGE_URL"] == "http://j"  # beside the run's own variables
    assert kwargs["runtime_env"]["env_vars"][WATCHER] == "0" and kwargs["address"] == "local"


def test_a_joined_cluster_gets_the_users_runtime_env_but_not_its_size(monkeypatch, init_calls):
    import socket

    from app.trainer.launch import ensure_ray

    user = {"num_cpus": 16, "namespace": "rl", "runtime_env": {"env_vars": {"JUDGE_URL": "http://j"}}}
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{head.getsockname()[1]}")
        ensure_ray(load_config(with_dotted({**BASE, "ray_kwargs": {"ray_init": user}})))
    (kwargs,) = init_calls
    assert "num_cpus" not in kwargs and kwargs["namespace"] == "rl"  # Ray refuses a size when it joins a cluster
    assert kwargs["runtime_env"]["env_vars"]["JUDGE_URL"] == "http://j"


def test_the_workers_get_the_drivers_typed_config_with_absolute_paths_and_nothing_reparses_it(monkeypatch, tmp_path):
    import ray.train.torch

    import serve
    from app.config import loader, typed
    from app.config.schema import TrainerRunConfig
    from app.trainer import launch, progress

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    cfg = load_config(
        with_dotted(
            BASE,
            **{
                "actor_rollout_ref.model.path": "model",
                "trainer.default_local_dir": "out",
                "reward_model.model.path": "hub-org/reward",
            },
        )
    )
    parses, handed = [], []

    def counting_build(cls, data, path=""):
        if cls is TrainerRunConfig and path == "":
            parses.append(path)
        return typed.build_typed(cls, data, path)

    class RecordingTrainer:
        def __init__(self, entry, *, train_loop_config, **kwargs):
            handed.append(train_loop_config)

        def fit(self):
            return None

    monkeypatch.setattr(loader, "build_typed", counting_build)
    monkeypatch.setattr(launch, "ensure_ray", lambda cfg: None)
    monkeypatch.setattr(serve, "deploy_rollout", lambda *args, **kwargs: None)
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", RecordingTrainer)
    monkeypatch.setattr(progress, "follow_progress", lambda out_dir: __import__("contextlib").nullcontext())
    monkeypatch.setattr(ray.serve, "delete", lambda name: None)
    launch.train(cfg)
    [loop_config] = handed
    sent = loop_config["config"]
    assert parses == []  # the driver's config travels as it is: no tree, no second load_config
    assert isinstance(sent, TrainerRunConfig)
    assert sent.data.train_files == str(tmp_path / "train.parquet")  # absolute although missing: the loader names it
    assert sent.actor_rollout_ref.model.path == str(tmp_path / "model")
    assert sent.reward_model.model.path == "hub-org/reward"  # not a folder here: a hub id, left as it is
    assert sent.trainer.default_local_dir == str(tmp_path / "out")
    assert cfg.trainer.default_local_dir == "out"  # the caller's config is not changed


IDLE_WORKERS_SCRIPT = """
import time
import psutil, ray
from app.trainer.launch import LOCAL_CLUSTER_SYSTEM_CONFIG, local_runtime_env
config = LOCAL_CLUSTER_SYSTEM_CONFIG if PRESTART_OFF else {}
# the run's job-wide runtime env: workers prestarted for it are the ones no actor takes
runtime_env = local_runtime_env({"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env,
         _system_config=config)

@ray.remote(num_cpus=0)
class Actor:
    def ready(self):
        return True

actors = [Actor.remote() for _ in range(3)]
ray.get([a.ready.remote() for a in actors])
[raylet] = [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]

def idle_workers():
    return sum("ray::IDLE" in " ".join(p.cmdline()) for p in raylet.children())

# a prestarted worker takes its name once it has imported Ray: wait up to 5 s for one to show
deadline = time.monotonic() + 5
while idle_workers() == 0 and time.monotonic() < deadline:
    time.sleep(0.2)
print(idle_workers())
"""


@pytest.mark.parametrize("prestart_off", [False, True])
def test_a_local_cluster_keeps_no_idle_prestarted_workers(prestart_off):
    """Ray prestarts workers for the first driver; a run starts only actors, so those would idle through it. Run with
    Ray's default as well, so that a Ray that stops prestarting shows here as a setting that no longer does anything.
    A subprocess: the session's cluster of conftest lives in this one."""
    import subprocess
    import sys

    script = f"PRESTART_OFF = {prestart_off}\n" + IDLE_WORKERS_SCRIPT
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    idle = int(done.stdout.strip().splitlines()[-1])
    assert (idle == 0) if prestart_off else (idle > 0)


@pytest.mark.parametrize(
    "overrides, waits",
    [
        ({}, False),  # CPU: the replica starts while the train worker loads the model
        ({"trainer.n_gpus_per_node": 2, "trainer.num_workers": None}, True),  # colocated GPUs: the replica first
        # restarts allowed: a replica that cannot start fails the driver once, not every restart of the workers
        ({"trainer.max_failures": 2}, True),
        ({"trainer.max_failures": -1}, True),
    ],
)
@pytest.mark.parametrize("started_cluster", [True, False])
def test_the_rollout_starts_beside_the_trainer_unless_they_share_gpus(
    monkeypatch, tmp_path, overrides, waits, started_cluster
):
    import ray
    import ray.train.torch

    import serve
    from app.trainer import launch, progress

    monkeypatch.chdir(tmp_path)  # the run's output folder goes here
    events = []

    class RecordingTrainer:
        def __init__(self, entry, **kwargs):
            events.append("trainer")

        def fit(self):
            events.append("fit")

    monkeypatch.setattr(launch, "ensure_ray", lambda cfg: started_cluster)
    monkeypatch.setattr(serve, "deploy_rollout", lambda *args, wait, **kwargs: events.append(("deploy", wait)))
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", RecordingTrainer)
    monkeypatch.setattr(progress, "follow_progress", lambda out_dir: __import__("contextlib").nullcontext())
    monkeypatch.setattr(ray.serve, "delete", lambda name: events.append("delete"))
    monkeypatch.setattr(ray, "shutdown", lambda: events.append("shutdown"))
    launch.train(load_config(with_dotted(BASE, **overrides)))
    # a cluster started for this run ends with it (the replicas with it); a joined one keeps running, less the app
    assert events == [("deploy", waits), "trainer", "fit", "shutdown" if started_cluster else "delete"]


def test_a_custom_samplers_file_becomes_absolute_and_a_module_stays_as_given(tmp_path):
    from app.trainer.launch import with_absolute_paths

    sampler = {"class_name": "S"}
    file_cfg = load_config(with_dotted(BASE, **{"data.sampler": {**sampler, "class_path": "samplers/s.py"}}))
    assert with_absolute_paths(file_cfg, cwd=tmp_path).data.sampler.class_path == str(tmp_path / "samplers" / "s.py")
    module_cfg = load_config(with_dotted(BASE, **{"data.sampler": {**sampler, "class_path": "pkg://my.samplers"}}))
    assert with_absolute_paths(module_cfg, cwd=tmp_path).data.sampler.class_path == "pkg://my.samplers"


def test_a_checkpoint_copy_folder_becomes_absolute_and_a_uri_stays_as_given(tmp_path):
    from app.trainer.launch import with_absolute_paths

    folder = load_config(with_dotted(BASE, **{"trainer.default_hdfs_dir": "copies/run"}))
    assert with_absolute_paths(folder, cwd=tmp_path).trainer.default_hdfs_dir == str(tmp_path / "copies" / "run")
    uri = load_config(with_dotted(BASE, **{"trainer.default_hdfs_dir": "s3://bucket/run"}))
    assert with_absolute_paths(uri, cwd=tmp_path).trainer.default_hdfs_dir == "s3://bucket/run"


def test_a_tokenizer_folder_becomes_absolute_and_a_hub_id_stays_as_given(tmp_path):
    from app.trainer.launch import with_absolute_paths

    (tmp_path / "tok").mkdir()
    folder = load_config(with_dotted(BASE, **{"actor_rollout_ref.model.tokenizer_path": "tok"}))
    assert with_absolute_paths(folder, cwd=tmp_path).actor_rollout_ref.model.tokenizer_path == str(tmp_path / "tok")
    hub = load_config(with_dotted(BASE, **{"actor_rollout_ref.model.tokenizer_path": "org/tok"}))
    assert with_absolute_paths(hub, cwd=tmp_path).actor_rollout_ref.model.tokenizer_path == "org/tok"
