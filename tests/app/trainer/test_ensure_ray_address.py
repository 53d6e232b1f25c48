"""ensure_ray's choice of cluster: its own local one when no address is given (whatever Ray's temp folder says), the
given one only when it answers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from entry_run import REPO, TAG_ENV, tagged_ray_processes
from support import free_port

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError


class _RecordedInit:
    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append(kwargs)


@pytest.fixture()
def fake_ray(monkeypatch):
    ray = pytest.importorskip("ray")
    init = _RecordedInit()
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 8.0}}])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return init


def _cfg(address=None) -> TrainerRunConfig:
    """A validated config of one train worker (the layout filled in, as ensure_ray gets it)."""
    from app.config import load_config

    return load_config(
        {
            "data": {"train_files": "unused.parquet"},
            "actor_rollout_ref": {"model": {"path": "unused"}},
            "trainer": {"num_workers": 1, "ray_address": address},
        }
    )


def test_without_an_address_the_run_asks_for_a_new_local_cluster(fake_ray):
    from app.trainer.launch import ensure_ray

    ensure_ray(_cfg())
    assert len(fake_ray.calls) == 1 and fake_ray.calls[0]["address"] == "local"


def test_an_address_that_does_not_answer_is_refused_before_ray_init(fake_ray):
    from app.trainer.launch import ensure_ray

    port = free_port()
    with pytest.raises(PreflightError, match=rf"^trainer.ray_address=127.0.0.1:{port}: no Ray cluster answers"):
        ensure_ray(_cfg(f"127.0.0.1:{port}"))
    assert fake_ray.calls == []


_START_LOCAL = """
import os, sys
from app.config import load_config
from app.trainer.launch import ensure_ray
from entry_run import tagged_ray_processes
import ray
cfg = load_config({"data": {"train_files": "unused.parquet"}, "actor_rollout_ref": {"model": {"path": "unused"}},
                   "trainer": {"num_workers": 1}})
ensure_ray(cfg)
print("gcs", ray.get_runtime_context().gcs_address)
print("tagged", len(tagged_ray_processes(os.environ["RAYRL_TEST_RUN_TAG"])))
ray.shutdown()
"""


@pytest.mark.slow
def test_a_dead_clusters_address_file_does_not_stop_a_local_run():
    """`ray start --head` then a crash leaves `<RAY_TMPDIR>/ray/ray_current_cluster` behind; a plain ray.init(num_cpus=)
    reads it and fails with "When connecting to an existing cluster, num_cpus and num_gpus must not be provided"."""
    temp = Path(tempfile.mkdtemp(prefix="rr", dir="/tmp"))  # short: Ray's socket paths live under it
    (temp / "ray").mkdir()
    dead = f"127.0.0.1:{free_port()}"
    (temp / "ray" / "ray_current_cluster").write_text(dead)
    tag = os.urandom(8).hex()
    env = {**os.environ, "RAY_TMPDIR": str(temp), "PYTHONPATH": f"{REPO}:{REPO / 'tests'}", TAG_ENV: tag}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", _START_LOCAL], cwd=temp, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("gcs ", "tagged ")))
    assert lines["gcs"] != dead  # a cluster of its own
    assert int(lines["tagged"]) >= 2  # its raylet and gcs_server, found by the tag: the count below means something
    assert tagged_ray_processes(tag) == []  # and none left once it ended
