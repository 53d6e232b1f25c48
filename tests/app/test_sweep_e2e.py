"""A real sweep: `app.sweep` (Hydra config, base compose, data pre-flight) runs two tiny GRPO trainings under Tune.

Two trials side by side (grid over the learning rate), each a whole `launch.train` job with its own Serve rollout
app and Ray Train worker: 2 steps, export. Checks each trial's isolated folder and artifacts, the results table, that
the best config composes back into the trial's config and that `app.plot` draws one curve per trial.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import tiny_run_overrides

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_sweep_of_two_real_trainings(ray_cluster, tiny_model_dir, tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from ray import serve

    from app.config import compose_config, load_config
    from app.plot import find_runs, plot_runs
    from app.sweep import run

    data_dir = tmp_path / "data"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app.prepare",
            "arithmetic",
            "--output",
            str(data_dir),
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
    sweep_dir = tmp_path / "sweep"
    base = tiny_run_overrides(tiny_model_dir, data_dir)
    overrides = [
        "name=e2e",
        f"output_dir={sweep_dir}",
        "base.config=grpo_trainer",
        "base.overrides=[" + ",".join(f"'{o}'" for o in base) + "]",
        "~params",
        "+params={actor_rollout_ref.actor.optim.lr:{grid:[1.0e-4,1.0e-3]}}",  # replaces the file's spaces
        "search.method=grid",
        "search.num_samples=1",
        "search.max_concurrent_trials=2",
        "scheduler.type=asha",
        "scheduler.grace_period=1",
    ]
    # outside any Hydra app, as from a notebook: the sweep composes its base config itself
    assert run(compose_config("sweep/grpo_small", overrides)) == 0

    with (sweep_dir / "results.csv").open() as f:
        table = list(csv.DictReader(f))
    assert sorted(float(r["actor_rollout_ref.actor.optim.lr"]) for r in table) == [1e-4, 1e-3]
    for r in table:
        trial = Path(r["output"])
        assert trial.parent == sweep_dir / "trials"
        rows = [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows][-1] == int(r["steps"])
        if r["status"] == "completed":  # ASHA may stop the second trial at step 1 when it validates lower
            assert [row["step"] for row in rows] == [0, 1, 2]
            assert (trial / "hf_model" / "config.json").is_file()
        record = json.loads((trial / "trial.json").read_text())
        assert record["experiment_name"] == f"e2e-{trial.name}" and str(record["seed"]) == r["seed"]
    assert table[0]["status"] == "completed"
    assert not [a for a in serve.status().applications if a.startswith("rollout-rayrl-e2e-")]

    # the best config is the best trial's config, with its own run name and folder
    with initialize_config_dir(config_dir=str(sweep_dir), version_base=None):
        best = load_config(compose(config_name="best"))
    assert best.actor_rollout_ref.actor.optim.lr == float(table[0]["actor_rollout_ref.actor.optim.lr"])
    assert best.trainer.seed == int(table[0]["seed"]) and best.trainer.experiment_name == "e2e-best"
    assert best.actor_rollout_ref.model.path == str(tiny_model_dir)
    assert OmegaConf.load(sweep_dir / "best.yaml").trainer.default_local_dir == str(sweep_dir / "best")

    assert len(find_runs(sweep_dir)) == 2  # one curve per trial
    assert plot_runs(sweep_dir, tmp_path / "curves.png").stat().st_size > 0
