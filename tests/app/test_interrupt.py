"""Stopping a run (`ray job stop` sends SIGTERM; Ctrl-C sends SIGINT) leaves nothing behind: the driver exits through
its clean-up, and every process it started (the local Ray cluster, the rollout replica, the train workers, the
reward workers) is gone, and the HTTP port is free for the next run.

`python -m app.train` runs as a subprocess with a Ray temp dir of its own (so it starts its own local cluster and
its processes can be told apart from any other on the machine); the signal goes once the first step has been logged.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from support import kill_ray_under, tiny_run_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return set()


def _alive(procs) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return out


def _under(temp_dir: str) -> list[psutil.Process]:
    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])):
                procs.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return procs


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["ray-job-stop", "ctrl-c"])
def test_a_stopped_run_leaves_no_process_and_frees_its_port(sig, tiny_model_dir, tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app.prepare",
            "arithmetic",
            "--output",
            str(tmp_path / "data"),
            "--train-size",
            "64",
            "--test-size",
            "2",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    overrides = tiny_run_overrides(tiny_model_dir, tmp_path / "data")
    port = int(next(o for o in overrides if o.startswith("actor_rollout_ref.rollout.http_port=")).split("=")[1])
    temp_dir = tempfile.mkdtemp(prefix="ri", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env |= {"RAY_TMPDIR": temp_dir, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "app.train",
        "--config-name",
        "grpo_trainer",
        *overrides,
        "trainer.total_training_steps=200",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    driver = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    seen, started = [], set()
    try:
        deadline = time.monotonic() + 300
        for line in driver.stdout:  # returns when the driver prints; bounded by the deadline and the driver's exit
            seen.append(line)
            started |= _descendants(driver.pid)
            if "step 1/" in line or time.monotonic() > deadline:
                break
        assert any("step 1/" in line for line in seen), "".join(seen[-40:])
        started |= _descendants(driver.pid) | set(_under(temp_dir))
        assert len(started) >= 3  # the cluster, the replica and the train worker at least
        driver.send_signal(sig)
        rest, _ = driver.communicate(timeout=180)
        assert driver.returncode != 0, rest[-4000:]  # stopped, not finished
        # every process of the run exits with the driver (the raylet reaps its workers right after)
        deadline = time.monotonic() + 60
        while _alive(started) and time.monotonic() < deadline:
            psutil.wait_procs([p for p in started if p.is_running()], timeout=5)
        assert _alive(started) == [], rest[-4000:]
        assert _alive(_under(temp_dir)) == []
        assert _port_is_free(port)
    finally:
        if driver.poll() is None:
            driver.kill()
        kill_ray_under(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
