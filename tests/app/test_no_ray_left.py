"""A run that fails after its own Ray cluster started leaves no Ray process behind: a reward function that raises in a
worker, in a run that started beside a dead cluster's address file. Processes are told apart by a tag in the
environment each run's processes inherit, so clusters other users run on the machine at the same time are never
counted. Mistakes refused on the driver never call `ray.init` (tests/app/test_train_mistakes.py checks that for each
one), so they cannot leave a Ray process."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from entry_run import run_entry, tagged_ray_processes
from support import free_port, tiny_run_overrides

pytestmark = pytest.mark.slow

RAISING_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError("answer_field")
"""


def test_a_run_failing_in_a_worker_leaves_no_ray_process(tiny_model_dir, small_arith_data, tmp_path):
    base = [
        "--config-name",
        "grpo_trainer",
        *tiny_run_overrides(tiny_model_dir, small_arith_data),
        f"trainer.default_local_dir={tmp_path / 'out'}",
        "trainer.logger=[console]",
    ]
    # the run has to start its own Ray beside a dead cluster's address file
    temp = Path(tempfile.mkdtemp(prefix="rr", dir="/tmp"))
    (temp / "ray").mkdir()
    (temp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
    reward = tmp_path / "raising_reward.py"
    reward.write_text(RAISING_REWARD)
    failed = run_entry(
        "app.train",
        base + [f"custom_reward_function.path={reward}", "reward_model.on_error=raise"],
        cwd=tmp_path,
        env={"RAY_TMPDIR": str(temp)},
        timeout=600,
    )
    assert failed.ray_init_called and failed.code == 1, failed.stderr_lines[-30:]
    last = failed.stderr_lines[-1]
    assert last.startswith("error: train worker rank 0 failed (RewardComputeError: ") and "answer_field" in last, (
        failed.stderr_lines[-30:]
    )
    assert "set trainer.max_failures" in last and last.endswith("(RAYRL_TRACEBACK=1 shows the whole traceback)")
    assert tagged_ray_processes(failed.tag) == []
