"""A batch of mistakes leaves no Ray process behind: neither those refused on the driver nor one found by a worker
after the run's own Ray cluster started (a reward function that raises, the run started beside a dead cluster's
address file). Processes are told apart by a tag in the environment each run's processes inherit, so clusters other
users run on the machine at the same time are never counted."""

from __future__ import annotations

import socket
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


def test_a_batch_of_mistakes_leaves_no_ray_process(tiny_model_dir, small_arith_data, tmp_path):
    base = [
        "--config-name",
        "grpo_trainer",
        *tiny_run_overrides(tiny_model_dir, small_arith_data),
        f"trainer.default_local_dir={tmp_path / 'out'}",
        "trainer.logger=[console]",
    ]
    bad_reward = tmp_path / "syntax.py"
    bad_reward.write_text("def compute_score(:\n")
    runs = []
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        for mistake in (
            ["actor_rollout_ref.actor.optim.lrr=1e-5"],
            ["actor_rollout_ref.model.path=/nonexistent"],
            [f"trainer.ray_address=127.0.0.1:{free_port()}"],
            [f"custom_reward_function.path={bad_reward}"],
            [f"actor_rollout_ref.rollout.http_port={holder.getsockname()[1]}"],
        ):
            runs.append(run_entry("app.train", base + mistake, cwd=tmp_path))
    for run in runs:
        assert run.code == 2 and len(run.stderr_lines) == 1 and not run.ray_init_called, run.stderr_lines[-5:]

    # one found in a worker, by a run that had to start its own Ray beside a dead cluster's address file
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
    runs.append(failed)

    assert [tagged_ray_processes(run.tag) for run in runs] == [[] for _ in runs]
