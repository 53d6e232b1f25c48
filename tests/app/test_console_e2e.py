"""The console of a real `python -m app.train` run (its own local Ray, vLLM rollout, two steps) is short and says
what happened: the data line, the validation before training, one line per step, the summary; none of Ray Train's
per-report dumps, Serve's access lines or vLLM's INFO lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import kill_ray_under, tiny_run_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# lines a run may print besides its own (data, validation, steps, summary): Ray's start-up notice with the dashboard's
# address, and the warnings of libraries (vLLM's about the CPU build, Ray's token auth)
OTHER_LINES_BUDGET = 20
OURS = ("data: ", "validation before training: ", "step ", "validation reward: ", "  ", "model: ")
# Ray's own actors warn (with tracebacks) when a shared box is too loaded to answer their health checks in time; that
# is the machine's state, not the run's chatter
RAY_HEALTH = ("(TrainController ", "(PlacementGroupCleaner ", "(ServeController ", "(ProxyActor ")


def test_a_short_runs_console_is_one_line_per_step(tiny_model_dir, small_arith_data, tmp_path):
    overrides = [
        o
        for o in tiny_run_overrides(tiny_model_dir, small_arith_data)
        if not o.startswith("actor_rollout_ref.rollout.name=")
    ]
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAY_ADDRESS") and k not in ("RAYRL_VERBOSE", "VLLM_LOGGING_LEVEL")
    }
    env |= {"RAY_TMPDIR": temp_dir, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "app.train",
        "--config-name",
        "grpo_trainer",
        *overrides,
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.cpu_kv_cache_gib=0.25",
        "actor_rollout_ref.model.lora_rank=8",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=540
        )
    finally:
        kill_ray_under(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    lines = done.stdout.splitlines()
    console = "\n".join(lines)
    assert done.returncode == 0, console[-6000:]
    assert sum(line.startswith("validation before training: reward ") for line in lines) == 1, console
    for step in (1, 2):
        assert sum(line.startswith(f"step {step}/2 | reward ") and " validation " in line for line in lines) == 1, (
            console
        )
    assert any(line.startswith("validation reward: ") for line in lines) and lines[-1].startswith("model: ")
    assert "Reporting training result" not in console  # Ray Train's per-report dump
    info = [line for line in lines if "INFO" in line and "Started a local Ray instance" not in line]
    assert info == [], console  # Serve's access and app lines, vLLM's INFO lines
    assert "it/s]" not in console  # no loading bars from inside Ray processes
    others = [line for line in lines if not line.startswith(OURS) and not any(a in line for a in RAY_HEALTH)]
    assert len(others) <= OTHER_LINES_BUDGET, console
