"""Dashboard metrics: the values derived from a step's metrics, and the series a Prometheus scrape of Ray returns."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from support import free_port, kill_ray_under

from app.trainer.ray_metrics import dashboard_values, publish_step_metrics

REPO = Path(__file__).resolve().parents[3]

STEP_METRICS = {
    "critic/score/mean": 0.5,
    "reward/score/mean": 0.625,
    "val-core/reward/mean": 0.75,
    "timing_s/step": 3.0,
    "timing_s/gen": 2.0,
    "timing_s/sync": 0.25,
    "actor/kl_loss": 0.0125,
    "training/policy_version": 4.0,
    "response_length/mean": 12.5,
}


def test_values_derive_rollout_tokens_per_second():
    values = dashboard_values(STEP_METRICS, step=4, samples_per_step=16)
    # 12.5 mean response tokens × 16 samples (8 prompts × n=2) = 200 tokens, generated in 2.0 s -> 100 tokens/s
    assert values["rollout_tokens"] == 200.0
    assert values["perf/rollout_tokens_per_s"] == 100.0
    assert values["kl"] == 0.0125 and values["step"] == 4.0
    assert values["val-core/reward/mean"] == 0.75 and values["timing_s/sync"] == 0.25
    assert values["critic/score/mean"] == 0.5 and values["reward/score/mean"] == 0.625  # trained batch, all samples


def test_kl_in_the_reward_and_missing_or_non_finite_values():
    values = dashboard_values(
        {
            "actor/reward_kl_penalty": 0.5,
            "critic/score/mean": float("nan"),
            "response_length/mean": 10.0,
            "timing_s/gen": 0.0,
        },
        step=1,
        samples_per_step=4,
    )
    assert values["kl"] == 0.5
    assert "critic/score/mean" not in values  # NaN is not published
    assert values["rollout_tokens"] == 40.0 and "perf/rollout_tokens_per_s" not in values  # no generation time
    assert dashboard_values({}, step=0, samples_per_step=4) == {"step": 0.0}  # a validation-only log


def test_publishing_without_ray_does_nothing(monkeypatch):
    import ray

    from app.config.schema import TrainerRunConfig
    from app.trainer import ray_metrics

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # e.g. the loop under unit tests
    monkeypatch.setattr(ray_metrics, "_metrics", None)
    publish_step_metrics(TrainerRunConfig(), STEP_METRICS, 1)
    assert ray_metrics._metrics is None and not ray_metrics._failed


def test_a_publishing_failure_never_reaches_the_training_loop(monkeypatch, capsys):
    import ray

    from app.config.schema import TrainerRunConfig
    from app.trainer import ray_metrics

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray_metrics, "_metrics", None)
    monkeypatch.setattr(ray_metrics, "_failed", False)

    def broken(*args, **kwargs):
        raise RuntimeError("no metrics agent")

    monkeypatch.setattr(ray_metrics, "DashboardMetrics", broken)
    publish_step_metrics(TrainerRunConfig(), STEP_METRICS, 1)  # must not raise
    publish_step_metrics(TrainerRunConfig(), STEP_METRICS, 2)
    assert ray_metrics._failed
    assert capsys.readouterr().err.count("dashboard metrics disabled: RuntimeError: no metrics agent") == 1


PUBLISHER = textwrap.dedent("""
    import sys
    import ray
    from app.config.schema import TrainerRunConfig

    port, temp_dir = int(sys.argv[1]), sys.argv[2]
    metrics = {metrics!r}
    ray.init(num_cpus=1, include_dashboard=False, _metrics_export_port=port, _temp_dir=temp_dir,
             _system_config={{"metrics_report_interval_ms": 500}}, log_to_driver=False, configure_logging=False)

    @ray.remote(num_cpus=0)
    class Rank0:  # publishes from a worker process, as the Ray Train rank-0 worker does
        def log(self, metrics, step):
            from app.trainer.ray_metrics import publish_step_metrics

            cfg = TrainerRunConfig()
            cfg.trainer.project_name, cfg.trainer.experiment_name = "dash", "exp-metrics"
            cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n = 8, 2
            publish_step_metrics(cfg, metrics, step)

    rank0 = Rank0.remote()
    ray.get(rank0.log.remote({{"val-core/reward/mean": 0.5}}, 0))  # validation before training
    ray.get(rank0.log.remote(metrics, 1))
    print("published", flush=True)
    sys.stdin.readline()  # the test closes stdin when it has scraped
    ray.shutdown()
""")


@pytest.mark.slow
def test_metrics_reach_the_prometheus_endpoint():
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="rm", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
    script = PUBLISHER.format(metrics=STEP_METRICS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(port), temp_dir],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        published = threading.Event()
        output: list[str] = []

        def read():
            for line in proc.stdout:
                output.append(line)
                if line.strip() == "published":
                    published.set()

        threading.Thread(target=read, daemon=True).start()
        assert published.wait(180), "".join(output[-30:])

        want = {
            "ray_rayrl_val_reward_mean": 0.75,
            "ray_rayrl_reward_mean": 0.5,
            "ray_rayrl_step_seconds": 3.0,
            "ray_rayrl_sample_reward_mean": 0.625,
            "ray_rayrl_rollout_tokens_per_second": 100.0,  # 12.5 tokens × 16 samples / 2.0 s
            "ray_rayrl_weight_sync_seconds": 0.25,
            "ray_rayrl_kl": 0.0125,
            "ray_rayrl_policy_version": 4.0,
            "ray_rayrl_training_step": 1.0,
            "ray_rayrl_steps_total": 1.0,  # the validation-only log is no step
            "ray_rayrl_rollout_tokens_total": 200.0,
            "ray_rayrl_step_duration_seconds_count": 1.0,
        }
        deadline = time.monotonic() + 60
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                body = ""
            seen = {}
            for family in text_string_to_metric_families(body):
                for sample in family.samples:
                    if sample.labels.get("experiment") == "exp-metrics" and sample.labels.get("project") == "dash":
                        seen[sample.name] = sample.value
            if all(name in seen for name in want):
                break
            time.sleep(0.5)  # bounded poll: the reporter agent exports every 0.5 s here (metrics_report_interval_ms)
        assert {name: seen.get(name) for name in want} == want
    finally:
        try:
            proc.stdin.close()
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        kill_ray_under(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
