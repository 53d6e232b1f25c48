"""How entry points end: one line for bad input; a worker's own error, out of Ray's wrappers, for a failed run."""

import pytest

from app.failure_report import TRACEBACK_ENV, one_line, print_error, report_run_failure, root_cause


class RewardBroke(RuntimeError):
    pass


def _worker_group_error(exc: BaseException):
    """What ray.train's TorchTrainer.fit raises when rank 0's train function raised `exc`."""
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2.api.exceptions import WorkerGroupError

    wrapped = UserExceptionWithTraceback(
        exc, f"Traceback (most recent call last):\n  File ...\n{type(exc).__name__}: {exc}\n"
    )
    return WorkerGroupError("[Rank 0]\n" + str(wrapped), {1: RuntimeError("rank 1 stopped"), 0: wrapped})


def test_the_worker_group_error_unwraps_to_the_lowest_ranks_own_exception():
    own = RewardBroke("reward for sample 3 (data_source='gsm8k') raised KeyError: 'answer'")
    assert root_cause(_worker_group_error(own)) is own


def test_a_controller_error_and_a_ray_task_error_unwrap_to_their_cause():
    from ray.exceptions import RayTaskError
    from ray.train.v2.api.exceptions import ControllerError

    own = ValueError("Deploying application rollout-x failed: bad max_model_len")
    task_error = RayTaskError("deploy", "Traceback ...\nValueError: bad max_model_len", own)
    assert root_cause(ControllerError(task_error)) is own
    assert root_cause(task_error.as_instanceof_cause()) is own


def test_a_failed_run_prints_the_workers_message_as_its_one_last_line(capsys, monkeypatch):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    exc = _worker_group_error(RewardBroke("reward for sample 3 raised KeyError: 'answer'"))
    assert report_run_failure(exc) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: train worker rank 0 failed (RewardBroke: reward for sample 3 raised KeyError: 'answer') and "
        "trainer.max_failures=0 stops the run at a worker's first failure; set trainer.max_failures "
        "(worker-group restarts) and trainer.save_freq (the checkpoints a restart resumes from) to let the "
        f"run resume ({TRACEBACK_ENV}=1 shows the whole traceback)"
    ]


def test_the_environment_variable_keeps_the_whole_traceback(monkeypatch):
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    exc = _worker_group_error(RewardBroke("boom"))
    with pytest.raises(type(exc)):
        report_run_failure(exc)


def test_messages_become_one_line(capsys):
    assert one_line("first\n  second\n") == "first second"
    assert (
        one_line("Deploy failed:\nTraceback (most recent call last):\n  File x\nValueError: too long")
        == "ValueError: too long"
    )
    assert print_error(ValueError("a\nb")) == 2
    assert capsys.readouterr().err == "error: a b\n"
