"""The rollout's HTTP port (actor_rollout_ref.rollout.http_port) is free on its host, for a run that starts its own
cluster: Serve's proxy would otherwise fail to bind it minutes later, after Ray, Serve and vLLM started. A run that
joins a cluster is not checked here: that cluster's Serve may already hold the port, which is then the one to use."""

from __future__ import annotations

import socket

from app.config.schema import TrainerRunConfig
from app.preflight.cluster_address import cluster_address, ray_already_up
from app.preflight.errors import PreflightError


def check_http_port(cfg: TrainerRunConfig) -> None:
    if cluster_address(cfg) is not None or ray_already_up():  # that cluster's Serve may hold it already
        return
    rollout = cfg.actor_rollout_ref.rollout
    family = socket.AF_INET6 if ":" in rollout.http_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as the proxy binds: a port left in TIME_WAIT by a finished run is free, one with a listener is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((rollout.http_host, rollout.http_port))
        except OSError as exc:
            raise PreflightError(
                f"actor_rollout_ref.rollout.http_port={rollout.http_port}: {rollout.http_host}:{rollout.http_port} "
                f"cannot be bound ({(exc.strerror or str(exc)).lower()}); another process holds it (an earlier run's "
                "Serve proxy?): stop it or give another port"
            ) from None
