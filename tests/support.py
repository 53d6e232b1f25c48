"""Plain helpers several test modules use (on pytest's `pythonpath`, so `from support import ...` works anywhere)."""
from __future__ import annotations

import signal
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_ray_under(temp_dir: str) -> None:
    """Stop only the Ray processes of the cluster whose --temp-dir is `temp_dir` (`ray stop` would stop every one)."""
    import psutil

    procs = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])):
                procs.append(p)
                procs.extend(p.children(recursive=True))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)
