"""serve.instance.start_serve: every entry point starts Serve with the rollout's HTTP address, quiet logging and a
controller that waits RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S for its proxy (Serve's 5 s killed the proxy of a run
started on a busy 2-core machine), the user's exported value winning."""

from types import SimpleNamespace

import pytest

from serve.instance import PROXY_READY_TIMEOUT_ENV, PROXY_READY_TIMEOUT_S, controller_options, start_serve


def test_the_controller_gets_a_proxy_readiness_timeout_longer_than_serves_five_seconds(monkeypatch):
    monkeypatch.delenv(PROXY_READY_TIMEOUT_ENV, raising=False)
    env = controller_options()["runtime_env"]["env_vars"]
    assert env == {PROXY_READY_TIMEOUT_ENV: PROXY_READY_TIMEOUT_S}
    assert float(env[PROXY_READY_TIMEOUT_ENV]) > 5.0


def test_a_timeout_the_user_exports_reaches_the_controller(monkeypatch):
    monkeypatch.setenv(PROXY_READY_TIMEOUT_ENV, "12.5")
    assert controller_options()["runtime_env"]["env_vars"] == {PROXY_READY_TIMEOUT_ENV: "12.5"}


def test_serve_options_accept_the_controller_options():
    """Serve validates controller options itself (only runtime_env.env_vars is allowed): ours must pass."""
    from ray.serve.config import ControllerOptions

    parsed = ControllerOptions.model_validate(controller_options())
    assert (
        parsed.runtime_env["env_vars"][PROXY_READY_TIMEOUT_ENV]
        == controller_options()["runtime_env"]["env_vars"][PROXY_READY_TIMEOUT_ENV]
    )


@pytest.mark.parametrize("port", [8000, "8123"])
def test_start_serve_binds_the_rollouts_address_and_passes_the_controller_options(monkeypatch, port):
    from ray import serve

    calls = []
    monkeypatch.setattr(serve, "start", lambda **kwargs: calls.append(kwargs))
    monkeypatch.delenv(PROXY_READY_TIMEOUT_ENV, raising=False)
    start_serve(SimpleNamespace(http_host="127.0.0.1", http_port=port))
    (kwargs,) = calls
    assert kwargs["http_options"] == {"host": "127.0.0.1", "port": int(port)}
    assert kwargs["controller_options"] == controller_options()
    assert kwargs["logging_config"].log_level in ("WARNING", "INFO")


@pytest.mark.slow
def test_the_running_controller_reads_the_timeout_serve_was_started_with(serve_http_port):
    """The session's Serve was started with `controller_options()` (tests/conftest.py): Serve hands its env_vars to
    the controller process, where the proxy readiness check reads them."""
    import os

    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    seen = ray.get(controller.__ray_call__.remote(lambda _self: os.environ.get(PROXY_READY_TIMEOUT_ENV)), timeout=60)
    assert seen == os.environ.get(PROXY_READY_TIMEOUT_ENV, PROXY_READY_TIMEOUT_S)
