"""A call run in a thread while the test's own thread acts on the system under it (kills a replica, waits for an
event); shared by the fault tests."""

from __future__ import annotations

import threading


class in_background:
    """Run `fn()` in a thread; calling the object joins it and returns its result or raises its error."""

    def __init__(self, fn):
        self._out: dict = {}

        def run():
            try:
                self._out["value"] = fn()
            except BaseException as err:  # handed to the test's thread
                self._out["error"] = err

        self._thread = threading.Thread(target=run)
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def __call__(self, timeout_s: float = 600.0):
        self._thread.join(timeout=timeout_s)
        assert not self._thread.is_alive(), f"the call hangs: not done after {timeout_s:g} s"
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]
