"""Which Ray cluster a run joins, and whether it answers.

trainer.ray_address, else RAY_ADDRESS (`ray job submit` sets it): join that cluster, which must answer within
seconds. Neither set: the run starts its own local cluster (`ray.init(address="local")`), whatever address file a
cluster that died without `ray stop` left in Ray's temp folder (a plain `ray.init()` would try to join that one).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Optional
from urllib.parse import urlsplit

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

CONNECT_TIMEOUT_S = 3.0


def cluster_address(cfg: TrainerRunConfig) -> Optional[tuple[str, str]]:
    """(address, where it came from: the config key or the environment variable), or None for a local cluster."""
    if cfg.trainer.ray_address:
        return cfg.trainer.ray_address, "trainer.ray_address"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    return None


def ray_already_up() -> bool:
    """This process is connected to a cluster already (a test session, a pipeline's second run): the run uses it."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def check_cluster_answers(cfg: TrainerRunConfig) -> None:
    """PreflightError, within CONNECT_TIMEOUT_S, when the address to join has nothing listening."""
    given = cluster_address(cfg)
    if given is None or ray_already_up():
        return
    address, source = given
    host, port = _host_port(address, source)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = (
            "no answer within {:g} s".format(CONNECT_TIMEOUT_S)
            if isinstance(exc, TimeoutError)
            else (exc.strerror or str(exc)).lower()
        )
        raise PreflightError(
            f"{source}={address}: no Ray cluster answers at {host}:{port} ({reason}); start it (`ray start --head`) "
            f"or unset {source} to run on a local cluster started for this run"
        ) from None


def _host_port(address: str, source: str) -> tuple[str, int]:
    if address == "auto":
        return _running_local_cluster(source)
    split = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = split.port
    except ValueError:
        port = None
    if not split.hostname or port is None:
        raise PreflightError(
            f"{source}={address} is not a Ray address: expected host:port (the head's GCS, "
            "e.g. 10.0.0.1:6379), ray://host:10001, auto, or unset for a local cluster"
        )
    return split.hostname, port


def _running_local_cluster(source: str) -> tuple[str, int]:
    """`auto`: the cluster Ray's temp folder names (what ray.init(address="auto") joins)."""
    from ray._private.services import canonicalize_bootstrap_address  # what ray.init itself resolves "auto" with

    try:
        address = canonicalize_bootstrap_address("auto")
    except Exception as exc:  # ConnectionError when none is found
        raise PreflightError(
            f"{source}=auto: no running Ray cluster found on this machine ({exc}); start one with "
            f"`ray start --head` or unset {source} to run on a local cluster"
        ) from None
    if address is None:
        raise PreflightError(
            f"{source}=auto: no running Ray cluster found on this machine; start one with "
            f"`ray start --head` or unset {source} to run on a local cluster"
        )
    host, _, port = address.rpartition(":")
    return host, int(port)
