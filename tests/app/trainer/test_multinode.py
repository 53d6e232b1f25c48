"""Placement by Ray custom resources on a simulated multi-node cluster, and weights that really cross nodes.

multinode_run.py runs a two-step GRPO run (full fine-tuning, fp32 on both sides) on a head plus node A
{"train_node": 1} and node B {"rollout_node": 1}, with the train worker and the rollout replica pinned by
trainer.worker_resources / actor_rollout_ref.rollout.replica_resources. It needs a cluster of its own, which the
suite's one session cluster rules out in this process, so it runs in a fresh interpreter with its own RAY_TMPDIR;
this test checks the JSON it prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import free_port, kill_ray_under

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
# Both sums add the same fp32 numbers in float64 (the replica's as vLLM's worker read them, the trainer's from its
# final export), only in different processes whose reduction order may differ: that moves a sum of ~1e5 elements of
# size ~0.02 by ~1e-13. Two Adam steps at lr 1e-3 move it by ~1e-3, so the tolerance separates the two by far.
SUM_TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def run(tiny_model_dir, small_arith_data, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("multinode")
    temp_dir = tempfile.mkdtemp(prefix="rmn", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(RAY_TMPDIR=temp_dir, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("multinode_run.py")),
                str(tiny_model_dir),
                str(small_arith_data),
                str(out / "run"),
                str(free_port()),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
    finally:
        kill_ray_under(temp_dir)  # whatever a failed run left of its three nodes; never another cluster's processes
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print("multinode run, seconds:", result["seconds"])  # shown with -s / -rP: where a slow run spent its time
    return result


def test_replica_follows_every_update_from_the_train_node(run):
    [before], [after] = run["before"], run["after"]
    assert before["version"] == 0 and before["weights_from_node"] is None
    # one sync per step, each before the next step's rollout
    assert run["metric_versions"] == [1.0, 2.0]
    assert after["version"] == 2 and set(run["versions"].values()) == {2}


def test_train_worker_and_replica_run_on_the_nodes_their_resources_name(run):
    [after] = run["after"]
    assert run["node_a"] != run["node_b"]
    assert after["node_id"] == run["node_b"]  # the replica's own runtime context
    assert after["weights_from_node"] == run["node_a"]  # where the trainer put the last payload


def test_replica_holds_the_trainers_weights_after_the_last_update(run):
    [before], [after] = run["before"], run["after"]
    assert before["weights_sum"] is None  # vLLM has loaded nothing but the model path yet
    assert after["digest"] != before["digest"]  # vLLM's own state changed
    assert after["weights_sum"] == pytest.approx(run["trainer_sum"], abs=SUM_TOLERANCE, rel=0)
    assert abs(run["trainer_sum"] - run["initial_sum"]) > 1000 * SUM_TOLERANCE  # the updates moved the weights
