"""The JSONL record: one line per step, and on resume the lines past the resumed step are dropped. TensorBoard,
MLflow and W&B: what each writes, read back with the tool's own reader; a logger that cannot start fails in the
pre-flight."""

import json
import math
import sys
from pathlib import Path

import pytest
from support import wandb_run_records

from app.config import ConfigError
from app.trainer.tracking import JsonlSink, Tracking, check_loggers, read_jsonl, read_metrics, wandb_mode

STEPS = {
    1: {"critic/score/mean": 0.1, "actor/pg_loss": -1.5},
    2: {"critic/score/mean": 0.25, "actor/pg_loss": -1.0},
    3: {"critic/score/mean": 0.5, "actor/pg_loss": math.nan},
}  # NaN is dropped, as in metrics.jsonl
WRITTEN = {"critic/score/mean": [(1, 0.1), (2, 0.25), (3, 0.5)], "actor/pg_loss": [(1, -1.5), (2, -1.0)]}
CONFIG = {"trainer": {"project_name": "proj", "seed": 3}, "data": {"train_batch_size": 8}}
# validation samples (trainer.log_val_generations) logged at step 2
SAMPLES = [
    {"data_source": "arith", "input": "2+2=", "output": "#### 4", "ground_truth": "4", "score": 1.0},
    {"data_source": "arith", "input": "3*3=", "output": "#### 6", "ground_truth": "9", "score": 0.2},
]


def log_steps(loggers, out_dir):
    tracking = Tracking(loggers, out_dir, total_steps=3, start_step=0, project="proj", experiment="exp", config=CONFIG)
    for step, metrics in STEPS.items():
        if step == 2:
            tracking.log_generations(SAMPLES, step)
        tracking.log(metrics, step)
    tracking.close()


def test_jsonl_drops_lines_after_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in (1, 2, 3):
        sink.log({"critic/score/mean": step / 10}, step)
    sink.close()
    # resumed from the step-2 checkpoint: step 3 is trained again, so its old line must go
    sink = JsonlSink(path, resume_step=2)
    sink.log({"critic/score/mean": 0.9, "bad": math.nan}, 3)
    sink.close()
    rows = read_metrics(path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1] == {"step": 3, "critic/score/mean": 0.9}  # NaN is not written


def test_unknown_logger_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.logger: unknown logger 'wandbb'"):
        Tracking(["wandbb"], tmp_path, total_steps=1, start_step=0, project="p", experiment="e")


def test_fresh_run_replaces_an_old_history(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log({"val-core/reward/mean": 0.2}, 0)
    sink.close()
    sink = JsonlSink(path, resume_step=0)  # a new run in the same folder, not a resume
    sink.log({"val-core/reward/mean": 0.3}, 0)
    sink.close()
    assert read_metrics(path) == [{"step": 0, "val-core/reward/mean": 0.3}]


def test_a_validation_only_record_keeps_every_run_in_the_order_written(tmp_path):
    # trainer.val_only: one row per run, whatever step each validated; the training history stays as it was
    (tmp_path / "metrics.jsonl").write_text('{"step": 20, "val-core/reward/mean": 0.5}\n')
    for step, reward in ((20, 0.5), (10, 0.4)):
        tracking = Tracking(["jsonl"], tmp_path, 0, step, project="p", experiment="e", val_only=True)
        tracking.log({"val-core/reward/mean": reward}, step)
        tracking.close()
    assert read_jsonl(tmp_path / "val_only.jsonl") == [
        {"step": 20, "val-core/reward/mean": 0.5},
        {"step": 10, "val-core/reward/mean": 0.4},
    ]
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 20, "val-core/reward/mean": 0.5}]


def test_tensorboard_holds_the_logged_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_steps(["tensorboard"], tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {key: [(e.step, pytest.approx(e.value)) for e in events.Scalars(key)] for key in WRITTEN} == WRITTEN
    [text] = events.Tensors("val/generations/text_summary")
    assert text.step == 2
    markdown = text.tensor_proto.string_val[0].decode()
    assert "### Sample 2" in markdown and "**input:** 3*3=" in markdown and "**score:** 0.2" in markdown


def test_mlflow_run_goes_to_a_database_in_the_run_folder(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # nothing may land in the working directory
    log_steps(["mlflow"], tmp_path)
    assert list((tmp_path / "cwd").iterdir()) == []
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.info.run_name == "exp"
    assert run.data.params == {"trainer.project_name": "proj", "trainer.seed": "3", "data.train_batch_size": "8"}
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] for key in WRITTEN}
    assert history == WRITTEN
    [artifact] = client.list_artifacts(run.info.run_id, "val_generations")
    assert artifact.path == "val_generations/val_step2.json"
    assert (tmp_path / "mlartifacts").is_dir()
    local = client.download_artifacts(run.info.run_id, artifact.path, str(tmp_path / "download"))
    assert json.loads(Path(local).read_text()) == [{"step": 2, **row} for row in SAMPLES]


def test_wandb_runs_offline_under_the_run_folder_with_the_config_and_metrics(wandb_env):
    out = wandb_env / "run"
    log_steps(["wandb"], out)
    run_file, records = wandb_run_records(out / "wandb")  # offline: no key and no WANDB_MODE
    [run] = [r.run for r in records if r.HasField("run")]
    assert (run.project, run.display_name) == ("proj", "exp")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert {k: config[k] for k in CONFIG} == CONFIG
    history = {}
    for record in records:
        if record.HasField("history"):
            for item in record.history.item:
                history.setdefault(item.key or "/".join(item.nested_key), []).append(
                    (record.history.step.num, json.loads(item.value_json))
                )
    assert {key: history.get(key) for key in WRITTEN} == WRITTEN
    [table] = (run_file.parent / "files" / "media" / "table" / "val").glob("generations_*.table.json")
    table = json.loads(table.read_text())
    assert table["columns"] == ["step", *SAMPLES[0]]
    assert table["data"] == [[2, *row.values()] for row in SAMPLES]


def test_wandb_mode_is_the_users_else_online_only_with_a_key(wandb_env, monkeypatch):
    assert wandb_mode() == "offline"
    (wandb_env / "netrc").write_text("machine api.wandb.ai login user password secret\n")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    (wandb_env / "netrc").write_text("machine example.org login user password secret\n")
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_mode() == "online"


@pytest.mark.parametrize(
    "logger, modules, package",
    [
        ("wandb", ["wandb"], "wandb"),
        ("mlflow", ["mlflow"], "mlflow"),
        ("tensorboard", ["torch.utils.tensorboard", "tensorboardX"], "tensorboard"),
    ],
)
def test_a_logger_without_its_package_is_named(monkeypatch, logger, modules, package):
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(ConfigError, match=rf"^trainer\.logger: '{logger}' needs the {package} package, .*pip install"):
        check_loggers(["console", logger])


def test_train_stops_at_a_missing_logger_package_before_reading_data_or_starting_ray(
    monkeypatch, capsys, tmp_path, tiny_model_dir
):
    import app.preflight
    from app.config import compose_config
    from app.train import run

    data = tmp_path / "prompts.jsonl"  # never read: the check stops first
    data.write_text('{"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}\n')
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setattr(app.preflight, "run_preflight", lambda *a, **k: pytest.fail("the logger check comes first"))
    cfg = compose_config(
        "grpo_trainer",
        [
            "trainer.logger=[console,wandb]",
            f"data.train_files={data}",
            f"data.val_files={data}",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
        ],
    )
    assert run(cfg) == 2
    assert "error: trainer.logger: 'wandb' needs the wandb package" in capsys.readouterr().err
