"""The reward worker processes: what they import and run, and how a target they cannot take is reported."""

import os
import select
import signal
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


# A reward call that hangs: it prints its process's pid (the worker's stdout is the parent's) once it is inside.
HUNG_REWARD = textwrap.dedent(
    """
    import os, time

    def compute_score(**kwargs):
        print(os.getpid(), flush=True)
        time.sleep(3600)
    """
)

MAIN_SCRIPT_HUNG = textwrap.dedent(
    """
    import sys
    from app.rewards.custom import RewardFnSpec
    from app.rewards.worker_pool import RewardWorkerPool

    if __name__ == "__main__":
        RewardWorkerPool(RewardFnSpec(sys.argv[1]), num_workers=1, timeout_s=3600).run([{}])
    """
)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the workers watch their parent through a pidfd (Linux)")
def test_a_worker_in_a_hung_call_ends_when_its_parent_is_killed(tmp_path):
    (tmp_path / "hung_reward.py").write_text(HUNG_REWARD)
    (tmp_path / "main.py").write_text(MAIN_SCRIPT_HUNG)
    parent = subprocess.Popen(
        [sys.executable, "main.py", str(tmp_path / "hung_reward.py")],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        worker_pid = int(parent.stdout.readline())  # the worker is inside the hung call
        worker = os.pidfd_open(worker_pid)
    finally:
        parent.kill()  # SIGKILL: no exit hook of the parent runs
        parent.wait(timeout=30)
    ended = []
    try:
        ended, _, _ = select.select([worker], [], [], 30)  # readable once the worker has ended
        assert ended, f"the reward worker {worker_pid} outlived its killed parent"
    finally:
        if not ended:
            os.kill(worker_pid, signal.SIGKILL)
        os.close(worker)
