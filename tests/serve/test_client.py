"""RolloutClient.wait_until_running: how a worker waits for replicas that start beside it (launch.train)."""

from __future__ import annotations

import pytest
from ray.serve.schema import ApplicationStatus, ApplicationStatusOverview, ServeStatus

from serve import client as client_module
from serve.client import RolloutClient, RolloutStartFailed

APP = "rollout-test"


def _statuses(monkeypatch, sequence):
    """serve.status() answers the (status, message) pairs of `sequence` in turn (None: no such application); the
    list of the statuses handed out is returned."""
    handed = []
    answers = iter(sequence)

    def status():
        entry = next(answers)
        handed.append(entry)
        if entry is None:
            return ServeStatus(applications={})
        state, message = entry
        overview = ApplicationStatusOverview(status=state, message=message, last_deployed_time_s=0.0, deployments={})
        return ServeStatus(applications={APP: overview})

    monkeypatch.setattr(client_module.serve, "status", status)
    monkeypatch.setattr(client_module, "STATUS_POLL_S", 0.0)
    return handed


def test_it_returns_once_the_application_runs(monkeypatch):
    deploying = (ApplicationStatus.DEPLOYING, "")
    handed = _statuses(monkeypatch, [deploying, deploying, (ApplicationStatus.RUNNING, ""), None])
    RolloutClient(APP, rollout=None).wait_until_running()
    assert len(handed) == 3  # asked until RUNNING, not once more


def test_a_failed_start_names_the_application_and_the_constructors_exception(monkeypatch):
    message = (
        "The deployment failed to start 3 times in a row.\nTraceback (most recent call last):\n"
        '  File "serve/deployment.py", line 1, in __init__\nValueError: max_model_len 64 is too small'
    )
    _statuses(monkeypatch, [(ApplicationStatus.DEPLOYING, ""), (ApplicationStatus.DEPLOY_FAILED, message)])
    with pytest.raises(RolloutStartFailed) as caught:
        RolloutClient(APP, rollout=None).wait_until_running()
    assert str(caught.value) == (
        f"the rollout application {APP!r} failed to start: ValueError: max_model_len 64 is too small "
        "(Serve's controller log has the traceback)"
    )


def test_an_application_that_is_gone_is_not_waited_for(monkeypatch):
    _statuses(monkeypatch, [(ApplicationStatus.DEPLOYING, ""), None])
    with pytest.raises(RolloutStartFailed, match="no longer deployed"):
        RolloutClient(APP, rollout=None).wait_until_running()
