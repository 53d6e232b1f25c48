"""What build_trainer hands the trackers (the run's config without secrets), and the driver's data check."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import load_config
from app.config.schema import TrainerRunConfig
from app.trainer.setup import _loggable, check_data, check_data_apart, total_training_steps

REPO = Path(__file__).resolve().parents[3]


def test_the_logged_config_hides_the_api_key_and_keeps_the_rest():
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.rollout.http_api_key = "sk-secret-123"
    tree = _loggable(cfg)
    assert "sk-secret-123" not in json.dumps(tree)
    assert tree["actor_rollout_ref"]["rollout"]["http_api_key"] == "<set>"
    assert tree["trainer"]["project_name"] == cfg.trainer.project_name
    assert cfg.actor_rollout_ref.rollout.http_api_key == "sk-secret-123"  # the run itself still has it
    assert _loggable(TrainerRunConfig())["actor_rollout_ref"]["rollout"]["http_api_key"] is None


def _run_cfg(model_dir, train_file, val_file) -> TrainerRunConfig:
    return load_config({"actor_rollout_ref": {"model": {"path": str(model_dir)}, "actor": {"ppo_mini_batch_size": 2}},
                        "data": {"train_files": str(train_file), "val_files": str(val_file), "train_batch_size": 2}})


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_data_check_in_a_child_counts_the_prompts_and_raises_the_childs_error(start_method, tiny_model_dir,
                                                                                  small_arith_data, tmp_path):
    from app.data import DataError

    cfg = _run_cfg(tiny_model_dir, small_arith_data / "train.parquet", small_arith_data / "test.parquet")
    assert check_data_apart(cfg, start_method) == (8, 2)  # the fixture's 8 training and 2 test problems

    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}\n{"question": "2+2="}\n')
    cfg = _run_cfg(tiny_model_dir, bad, small_arith_data / "test.parquet")
    with pytest.raises(DataError) as in_process:
        check_data(cfg)
    with pytest.raises(DataError) as in_child:
        check_data_apart(cfg, start_method)
    assert str(in_child.value) == str(in_process.value) and "prompts.jsonl" in str(in_child.value)


def test_the_driver_imports_none_of_what_the_data_check_reads_with(tiny_model_dir, small_arith_data):
    # the point of the child: these stay out of the driver, which waits out the whole run
    code = ("import sys\n"
            "from app.config import load_config\n"
            "from app.trainer.setup import check_data_apart\n"
            "model, train, val = sys.argv[1:]\n"
            "cfg = load_config({'actor_rollout_ref': {'model': {'path': model}, 'actor': {'ppo_mini_batch_size': 2}},\n"
            "                   'data': {'train_files': train, 'val_files': val, 'train_batch_size': 2}})\n"
            "print(check_data_apart(cfg), [m for m in ('transformers', 'tokenizers') if m in sys.modules])\n")
    paths = [str(tiny_model_dir), str(small_arith_data / "train.parquet"), str(small_arith_data / "test.parquet")]
    out = subprocess.run([sys.executable, "-c", code, *paths], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "(8, 2) []"


def test_total_training_steps_count_the_full_generation_batches_of_every_epoch():
    cfg = TrainerRunConfig()
    cfg.data.train_batch_size, cfg.data.gen_batch_size, cfg.trainer.total_epochs = 4, 6, 2
    # one step per generation round of gen_batch_size prompts; the loader drops the last 2 of the 20 prompts
    assert total_training_steps(cfg, 20) == (20 // 6) * 2 == 6
    cfg.trainer.total_training_steps = 5
    assert total_training_steps(cfg, 20) == 5  # given: it wins
