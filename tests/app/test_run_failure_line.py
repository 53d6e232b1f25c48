"""The one line app.train ends with when Ray Train gives up on the run (`app.failure_report.failure_line`), built from
the exceptions Ray Train 2's `trainer.fit()` raises; no cluster."""

from __future__ import annotations

import ray.exceptions
from ray.train import WorkerGroupError
from ray.train.v2._internal.exceptions import UserExceptionWithTraceback, WorkerHealthCheckFailedError

from app.failure_report import failure_line
from serve.client import RolloutStartFailed
from serve.replica_retry import ReplicaRetryExhausted


def test_a_dead_worker_with_max_failures_0_names_the_keys_that_let_a_run_resume():
    died = WorkerHealthCheckFailedError("Worker health check failed.", ray.exceptions.ActorDiedError())
    err = WorkerGroupError("...200 lines...", {1: died})

    line = failure_line(err, max_failures=0)

    assert "\n" not in line
    assert line.startswith(
        "train worker rank 1 failed (ActorDiedError: The actor died unexpectedly before finishing this task.)"
    )
    assert "trainer.max_failures=0" in line and "set trainer.max_failures" in line and "trainer.save_freq" in line


def test_the_lowest_failing_rank_and_its_users_exception_are_named_after_the_restarts_ran_out():
    failures = {
        3: UserExceptionWithTraceback(ValueError("late"), "Traceback ..."),
        0: UserExceptionWithTraceback(ValueError("reward function returned None\nrow 7"), "Traceback ..."),
    }

    line = failure_line(WorkerGroupError("...", failures), max_failures=2)

    assert line == (
        "train worker rank 0 failed (ValueError: reward function returned None row 7) after "
        "trainer.max_failures=2 restarts of the worker group"
    )


def test_a_rollout_replica_past_its_retry_bound_is_reported_in_its_own_words():
    exhausted = ReplicaRetryExhausted(
        "generate of prompts [0, 4) at policy version 3: rollout replica k3xq9w died "
        "(...); raise actor_rollout_ref.rollout.replica_retry_max / "
        "replica_retry_timeout_s"
    )
    err = WorkerGroupError("...", {0: UserExceptionWithTraceback(exhausted, "Traceback ...")})

    assert failure_line(err, max_failures=0) == str(exhausted)


def test_replicas_that_could_not_start_are_reported_in_their_own_words():
    failed = RolloutStartFailed(
        "the rollout application 'rollout-x' failed to start: ValueError: max_model_len 64 is too small "
        "(Serve's controller log has the traceback)"
    )
    err = WorkerGroupError("...", {0: UserExceptionWithTraceback(failed, "Traceback ...")})

    # no restart of the train workers mends it, so no advice on trainer.max_failures
    assert failure_line(err, max_failures=0) == str(failed)
    assert failure_line(err, max_failures=3) == str(failed)
