"""The reward worker processes: what they import and run, and how a target they cannot take is reported."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.rewards.custom import RewardFnSpec
from app.rewards.worker_pool import RewardWorkerPool

REPO = Path(__file__).resolve().parents[3]


def run_main_script(text: str, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """`text` run as a script's main module (python main.py ARGS) in `folder`, with the repository importable."""
    script = folder / "main.py"
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=folder,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


# A main script with a side effect at import, as Ray's worker script has (it imports Ray): multiprocessing's spawn and
# forkserver children run a script main again, so each worker would append a line.
MAIN_SCRIPT = textwrap.dedent(
    """
    import os, sys
    with open(sys.argv[1], "a") as marker:
        marker.write(f"{os.getpid()}\\n")

    from app.rewards.custom import RewardFnSpec
    from app.rewards.worker_pool import RewardWorkerPool

    if __name__ == "__main__":
        pool = RewardWorkerPool(RewardFnSpec(), num_workers=2, timeout_s=30)
        tasks = [dict(data_source="arithmetic", solution_str=f"#### {n}", ground_truth="5", extra_info=None)
                 for n in (5, 6, 5)]
        outcomes = pool.run(tasks)
        pool.close()
        print([o.value["score"] for o in outcomes])
    """
)


def test_workers_do_not_run_the_parents_main_script(tmp_path):
    marker = tmp_path / "imports.txt"
    done = run_main_script(MAIN_SCRIPT, tmp_path, str(marker))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.0, 0.1, 1.0]"  # right and marked 1.0, marked wrong 0.1: the built-in rules ran
    assert len(marker.read_text().splitlines()) == 1  # the parent's own import only, none in the two workers


def test_a_target_that_cannot_be_pickled_fails_in_the_parent_naming_it():
    pool = RewardWorkerPool(lambda **kwargs: 1.0, num_workers=1, timeout_s=30)
    with pytest.raises(ValueError, match="cannot start a reward worker process with <function .*<lambda>.*pickle"):
        pool.run([{}])


def test_a_target_the_worker_cannot_load_is_reported(tmp_path):
    broken = tmp_path / "broken_reward.py"
    broken.write_text("raise ImportError('needs a package this machine lacks')\n")
    pool = RewardWorkerPool(RewardFnSpec(str(broken)), num_workers=1, timeout_s=30)
    try:
        with pytest.raises(RuntimeError, match="could not load its function: .*needs a package this machine lacks"):
            pool.run([{}])
    finally:
        pool.close()


MAIN_SCRIPT_FUNCTION = textwrap.dedent(
    """
    from app.rewards.worker_pool import RewardWorkerPool

    def score(**kwargs):
        return 1.0

    if __name__ == "__main__":
        pool = RewardWorkerPool(score, num_workers=1, timeout_s=30)
        try:
            pool.run([{}])
        except RuntimeError as err:
            print(err)
        finally:
            pool.close()
    """
)


def test_a_function_of_the_main_script_is_refused_naming_it(tmp_path):
    done = run_main_script(MAIN_SCRIPT_FUNCTION, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reward worker could not load its function: AttributeError: Can't get attribute 'score'" in done.stdout
