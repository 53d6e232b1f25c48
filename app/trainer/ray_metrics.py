"""Training metrics as Ray custom metrics, so the Ray dashboard (Metrics tab) and its Prometheus endpoint show them.

Rank 0 calls `publish_step_metrics(cfg, metrics, step)` from the loop's `_log` once per logged step. Every series is
tagged with the run: `project` (trainer.project_name) and `experiment` (trainer.experiment_name; sweep trials have
their own). Prometheus names get Ray's `ray_` prefix, e.g. `ray_rayrl_val_reward_mean{project=..., experiment=...}`.

    rayrl_reward_mean                  gauge      critic/score/mean (training reward of the trained batch)
    rayrl_sample_reward_mean           gauge      reward/score/mean (every sample generated, before filtering)
    rayrl_val_reward_mean              gauge      val-core/reward/mean (validation score)
    rayrl_step_seconds                 gauge      timing_s/step
    rayrl_step_duration_seconds        histogram  timing_s/step
    rayrl_rollout_tokens_per_second    gauge      perf/rollout_tokens_per_s (derived, below)
    rayrl_weight_sync_seconds          gauge      timing_s/sync
    rayrl_kl                           gauge      actor/kl_loss, else actor/reward_kl_penalty
    rayrl_policy_version               gauge      training/policy_version
    rayrl_training_step                gauge      the step number
    rayrl_steps_total                  counter    training steps done
    rayrl_rollout_tokens_total         counter    response tokens generated for training

Tokens generated per step are derived from what the step's metrics hold: response_length/mean (mean over every sample
of the global batch) × data.train_batch_size × rollout.n samples; per second, divided by timing_s/gen.
Publishing never raises into the training loop: without Ray it does nothing, and a failure is reported once.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional

STEP_BUCKETS_S = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200]
TAG_KEYS = ("project", "experiment")

# (metric name, description, metrics-dict key giving its value)
GAUGES = (
    ("rayrl_reward_mean", "Mean training reward per sample (critic/score/mean)", "critic/score/mean"),
    # under dynamic sampling the trained batch keeps only groups that scored unlike, so critic/score stays middling
    # while the policy improves; this one is over every sample the step generated
    (
        "rayrl_sample_reward_mean",
        "Mean score of every sample generated this step, before dynamic sampling drops groups (reward/score/mean)",
        "reward/score/mean",
    ),
    ("rayrl_val_reward_mean", "Mean validation reward (val-core/reward/mean)", "val-core/reward/mean"),
    ("rayrl_step_seconds", "Wall time of the last training step, s (timing_s/step)", "timing_s/step"),
    ("rayrl_rollout_tokens_per_second", "Response tokens generated per second of rollout", "perf/rollout_tokens_per_s"),
    (
        "rayrl_weight_sync_seconds",
        "Seconds to push new weights to the rollout service (timing_s/sync)",
        "timing_s/sync",
    ),
    ("rayrl_kl", "KL to the reference policy (actor/kl_loss or actor/reward_kl_penalty)", "kl"),
    (
        "rayrl_policy_version",
        "Policy version the rollout service serves (training/policy_version)",
        "training/policy_version",
    ),
    ("rayrl_training_step", "The training step last logged", "step"),
)
# the GAUGES keys that dashboard_values computes; every other key is read from the step's metrics as it is
DERIVED = ("step", "kl", "perf/rollout_tokens_per_s")


def dashboard_values(metrics: dict[str, Any], step: int, samples_per_step: int) -> dict[str, float]:
    """The values to publish for one logged step, by metrics-dict key (see GAUGES); non-finite values are left out.

    Adds `perf/rollout_tokens_per_s` and `rollout_tokens` (tokens generated this step) when the step generated, and
    `kl` from actor/kl_loss (KL in the loss) or actor/reward_kl_penalty (KL in the reward).
    """
    out: dict[str, float] = {"step": float(step)}
    for _, _, key in GAUGES:
        if key not in DERIVED:
            _put(out, key, metrics.get(key))
    _put(out, "kl", metrics.get("actor/kl_loss", metrics.get("actor/reward_kl_penalty")))
    length, gen_s = _finite(metrics.get("response_length/mean")), _finite(metrics.get("timing_s/gen"))
    if length is not None and samples_per_step > 0:
        tokens = length * samples_per_step
        out["rollout_tokens"] = tokens
        if gen_s is not None and gen_s > 0:
            out["perf/rollout_tokens_per_s"] = tokens / gen_s
    return out


class DashboardMetrics:
    """The Ray metric objects of one run (one set per process), tagged with its project and experiment."""

    def __init__(self, project: str, experiment: str) -> None:
        from ray.util.metrics import Counter, Gauge, Histogram

        tags = {"project": project, "experiment": experiment}
        self.tags = tags
        self.gauges = {}
        for name, description, key in GAUGES:
            gauge = Gauge(name, description=description, tag_keys=TAG_KEYS)
            gauge.set_default_tags(tags)
            self.gauges[key] = gauge
        self.step_hist = Histogram(
            "rayrl_step_duration_seconds",
            description="Training step wall time, s",
            boundaries=STEP_BUCKETS_S,
            tag_keys=TAG_KEYS,
        )
        self.steps = Counter("rayrl_steps_total", description="Training steps done", tag_keys=TAG_KEYS)
        self.tokens = Counter(
            "rayrl_rollout_tokens_total", description="Response tokens generated for training", tag_keys=TAG_KEYS
        )
        for metric in (self.step_hist, self.steps, self.tokens):
            metric.set_default_tags(tags)

    def publish(self, values: dict[str, float]) -> None:
        for key, gauge in self.gauges.items():
            if key in values:
                gauge.set(values[key])
        if "timing_s/step" in values:  # a training step (validation-only logs have no step time)
            self.step_hist.observe(values["timing_s/step"])
            self.steps.inc(1.0)
            if values.get("rollout_tokens", 0) > 0:
                self.tokens.inc(values["rollout_tokens"])


_metrics: Optional[DashboardMetrics] = None
_failed = False


def publish_step_metrics(cfg: Any, metrics: dict[str, Any], step: int) -> None:
    """Publish one logged step of `cfg`'s run (a TrainerRunConfig). A no-op without Ray; never raises."""
    global _metrics, _failed
    if _failed:
        return
    try:
        import ray

        if not ray.is_initialized():
            return
        project, experiment = cfg.trainer.project_name, cfg.trainer.experiment_name
        if _metrics is None or _metrics.tags != {"project": project, "experiment": experiment}:
            _metrics = DashboardMetrics(project, experiment)
        samples = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
        _metrics.publish(dashboard_values(metrics, step, samples))
    except Exception as exc:  # dashboards are optional; training is not
        _failed = True
        print(f"warning: dashboard metrics disabled: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _finite(value: Any) -> Optional[float]:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _put(out: dict[str, float], key: str, value: Any) -> None:
    value = _finite(value)
    if value is not None:
        out[key] = value
