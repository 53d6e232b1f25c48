"""Which cluster a run joins, and the check that it answers within seconds."""

import socket
import time

import pytest
from support import free_port

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.cluster_address import CONNECT_TIMEOUT_S, check_cluster_answers, cluster_address
from app.preflight.http_port import check_http_port


@pytest.fixture(autouse=True)
def no_ray_yet(monkeypatch):
    """As in a fresh `python -m app.train`: the suite's own Ray cluster, which the checks leave alone, is not this."""
    import app.preflight.cluster_address
    import app.preflight.http_port

    for module in (app.preflight.cluster_address, app.preflight.http_port):
        monkeypatch.setattr(module, "ray_already_up", lambda: False)


def _cfg(address=None) -> TrainerRunConfig:
    cfg = TrainerRunConfig()
    cfg.trainer.ray_address = address
    return cfg


def test_the_config_key_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert cluster_address(_cfg("10.0.0.1:6379")) == ("10.0.0.1:6379", "trainer.ray_address")
    assert cluster_address(_cfg()) == ("10.0.0.2:6379", "RAY_ADDRESS")
    monkeypatch.delenv("RAY_ADDRESS")
    assert cluster_address(_cfg()) is None


def test_an_address_with_a_listener_passes_and_one_without_is_refused_at_once(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        check_cluster_answers(_cfg(f"127.0.0.1:{listener.getsockname()[1]}"))
        check_cluster_answers(_cfg(f"ray://127.0.0.1:{listener.getsockname()[1]}"))
    port = free_port()
    start = time.monotonic()
    with pytest.raises(PreflightError, match=rf"trainer.ray_address=127.0.0.1:{port}: no Ray cluster answers"):
        check_cluster_answers(_cfg(f"127.0.0.1:{port}"))
    assert time.monotonic() - start < CONNECT_TIMEOUT_S


def test_an_address_that_is_not_one(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(PreflightError, match="trainer.ray_address=my-cluster is not a Ray address"):
        check_cluster_answers(_cfg("my-cluster"))


def test_the_http_port_is_checked_only_for_a_cluster_the_run_starts(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        cfg = _cfg()
        cfg.actor_rollout_ref.rollout.http_port = holder.getsockname()[1]
        with pytest.raises(PreflightError, match="cannot be bound"):
            check_http_port(cfg)
        cfg.trainer.ray_address = "10.0.0.1:6379"  # that cluster's Serve may hold the port: not refused here
        check_http_port(cfg)
