"""`ray job submit --working-dir <repo> -- python -m app.train ...` on a Ray head node of our own.

The test starts its own head node (`ray start --head` with its own --temp-dir and free ports, so it neither meets nor
stops any other cluster on the machine: `ray stop` would stop them all, so the test kills only the processes of its
temp dir), submits a tiny training job with the CLI (which returns once the job has ended; the call is bounded by a
timeout), checks that it SUCCEEDED, the run's artifacts, and that the run's dashboard metrics reached the cluster's
Prometheus endpoint.

The job's run (vLLM rollout with LoRA) also checks the console a run prints, so that no second training run and cluster
is needed for it: the job's log is short and says what happened (the data line, the validation before training, one line
per step, the summary), with none of Ray Train's per-report dumps, Serve's access lines or vLLM's INFO lines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

import pytest
from support import free_port, kill_ray_under, tiny_run_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's ray and python
# lines a run may print besides its own (data, validation, steps, summary): Ray's notice of the cluster it joined, and
# the warnings of libraries (vLLM's about the CPU build, Ray's token auth)
OTHER_LINES_BUDGET = 20
OURS = ("data: ", "validation before training: ", "step ", "validation reward: ", "  ", "model: ")
# Ray's own actors warn (with tracebacks) when a shared box is too loaded to answer their health checks in time, and
# the raylet warns every few seconds while the disk under its temp dir is over 95% full; that is the machine's state,
# not the run's chatter
RAY_HEALTH = (
    "(TrainController ",
    "(PlacementGroupCleaner ",
    "(ServeController ",
    "(ProxyActor ",
    "file_system_monitor.cc",
)
# Ray's own notices of a job starting and joining its cluster (a run started without one logs "Started a local Ray
# instance" instead): the job manager's runtime-env line and ray.init's two lines with the cluster's addresses
RAY_JOINED = ("Runtime env is setting up", "Connecting to existing Ray cluster", "Connected to Ray cluster")
TAIL_MARK = "Tailing logs until the job exits"
CLI_LINE = re.compile(r"\d{4}-\d\d-\d\d [\d:,]+\s+[A-Z]+ cli\.py:\d+ -- ")  # the `ray job` CLI's own log lines


def cluster_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # the job's `python` is the venv's
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["RAY_AUTH_MODE"] = "token"  # Ray 2.60's `ray start` requires a token; the CLI sends ~/.ray's only in this mode
    return env


@pytest.fixture
def head_node():
    """A Ray head node of this test's own: {'dashboard': http address for jobs, 'temp_dir': its temp dir}."""
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    dashboard_port, metrics_port = free_port(), free_port()
    cmd = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--port",
        str(free_port()),
        "--num-cpus",
        "8",
        "--disable-usage-stats",
        "--temp-dir",
        temp_dir,
        "--include-dashboard",
        "true",
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        str(dashboard_port),
        "--ray-client-server-port",
        str(free_port()),
        "--dashboard-agent-listen-port",
        str(free_port()),
        "--metrics-export-port",
        str(metrics_port),
        # workers export their metrics every second (Ray's default: 10 s), so a step's values reach the endpoint
        # before the worker that published them ends
        "--system-config",
        json.dumps({"metrics_report_interval_ms": 1000}),
    ]
    try:
        started = subprocess.run(cmd, env=cluster_env(), capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr
        yield {
            "dashboard": f"http://127.0.0.1:{dashboard_port}",
            "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
            "temp_dir": temp_dir,
        }
    finally:
        kill_ray_under(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def submit(
    head: dict, entrypoint: list[str], timeout_s: float, while_running: Callable[[], None] = lambda: None
) -> subprocess.CompletedProcess:
    """`ray job submit` as the README shows: it streams the job's logs and returns when the job has finished.
    `while_running` is called every half second until then."""
    finished = threading.Event()

    def poll() -> None:
        while not finished.wait(0.5):
            while_running()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        return _submit(head, entrypoint, timeout_s)
    finally:
        finished.set()
        poller.join()


def _submit(head: dict, entrypoint: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(BIN / "ray"),
            "job",
            "submit",
            "--address",
            head["dashboard"],
            "--working-dir",
            str(REPO),
            "--",
            *entrypoint,
        ],
        env=cluster_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def tiny_overrides(model_dir: Path, data_dir: Path, out_dir: Path) -> list[str]:
    """The suite's tiny GRPO run (`support.tiny_run_overrides`) with vLLM rollout and LoRA, logging to the console and
    metrics.jsonl."""
    return [
        *(o for o in tiny_run_overrides(model_dir, data_dir) if not o.startswith("actor_rollout_ref.rollout.name=")),
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.cpu_kv_cache_gib=0.25",
        "actor_rollout_ref.model.lora_rank=8",
        "trainer.logger=[console,jsonl]",
        "trainer.experiment_name=job-submit",
        f"trainer.default_local_dir={out_dir}",
    ]


def scrape(url: str, experiment: str) -> dict[str, float]:
    """{sample name: value} of the Prometheus endpoint's series tagged with `experiment`."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        body = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return {}
    return {
        s.name: s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.labels.get("experiment") == experiment
    }


def scrape_job_submit(head: dict) -> dict[str, float]:
    """The endpoint's series of this file's run. Ray drops a gauge two report intervals after the worker that set it
    last exported it, so a finished run's gauges are gone soon after its workers end: they are read while it runs."""
    return scrape(head["metrics"], experiment="job-submit")


def job_log(cli_stdout: str) -> list[str]:
    """The lines the job itself printed, out of `ray job submit`'s output: those after the CLI's "Tailing logs" line
    that are not the CLI's own log lines (the "Job '...' succeeded" rules it adds once the job has ended)."""
    lines = cli_stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if TAIL_MARK in line]
    assert starts, cli_stdout[-6000:]
    return [line for line in lines[starts[0] + 1 :] if not CLI_LINE.match(line)]


def check_console(lines: list[str]) -> None:
    """One line per step and the summary, none of Ray Train's, Serve's or vLLM's chatter, few other lines."""
    console = "\n".join(lines)
    assert sum(line.startswith("validation before training: reward ") for line in lines) == 1, console
    for step in (1, 2):
        assert sum(line.startswith(f"step {step}/2 | reward ") and " validation " in line for line in lines) == 1, (
            console
        )
    assert any(line.startswith("validation reward: ") for line in lines) and lines[-1].startswith("model: "), console
    assert "Reporting training result" not in console  # Ray Train's per-report dump
    info = [line for line in lines if "INFO" in line and not any(notice in line for notice in RAY_JOINED)]
    assert info == [], console  # Serve's access and app lines, vLLM's INFO lines
    assert "it/s]" not in console  # no loading bars from inside Ray processes
    others = [line for line in lines if not line.startswith(OURS) and not any(a in line for a in RAY_HEALTH)]
    assert len(others) <= OTHER_LINES_BUDGET, console


def prepare_arithmetic(out: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app.prepare",
            "arithmetic",
            "--output",
            str(out),
            "--train-size",
            "16",
            "--test-size",
            "8",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def test_training_job_submitted_to_a_cluster_succeeds_with_a_quiet_console(head_node, tiny_model_dir, tmp_path):
    data_dir = prepare_arithmetic(tmp_path / "data")
    out_dir = tmp_path / "run"
    entry = [
        "python",
        "-m",
        "app.train",
        "--config-name",
        "grpo_trainer",
        *tiny_overrides(tiny_model_dir, data_dir, out_dir),
    ]
    seen: dict[str, float] = {}  # the last value of each series while the job ran
    done = submit(head_node, entry, timeout_s=420, while_running=lambda: seen.update(scrape_job_submit(head_node)))
    assert done.returncode == 0 and "succeeded" in done.stdout, (done.stdout + done.stderr)[-8000:]
    check_console(job_log(done.stdout))
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # validation before training, then two steps
    assert all("val-core/reward/mean" in r for r in rows)  # trainer.test_freq=1
    assert "critic/score/mean" in rows[1] and "timing_s/step" in rows[2]
    assert (out_dir / "hf_model" / "config.json").is_file()
    assert any(p.name.endswith(".safetensors") for p in (out_dir / "hf_model").iterdir())

    # the rank-0 worker published the run's dashboard metrics: the cluster's Prometheus endpoint had them
    want = {
        "ray_rayrl_training_step": 2.0,
        "ray_rayrl_steps_total": 2.0,
        "ray_rayrl_val_reward_mean": rows[-1]["val-core/reward/mean"],
    }
    assert {name: seen.get(name) for name in want} == want
