"""One xdist worker for every test that starts Ray, Serve or vLLM (`make test` runs `pytest -n 2 --dist loadgroup`).

xdist's own `xdist_group` marker does not group on pytest 9 (xdist 3.8 renames the item's `_nodeid`, which pytest 9
no longer reads), so the suite schedules the group itself: each worker writes the ids of its Ray tests to a folder the
controller made (`pytest_configure_node` hands it over), and the controller's scheduler (`pytest_xdist_make_scheduler`)
reads them and sends all those tests to one worker as one unit, one after another; the other tests go one by one to
whichever worker is free.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

RAY_GROUP = "ray"
# the session's cluster; `serve_http_port` and the Serve fixtures build on it
RAY_FIXTURES = {"ray_cluster"}
IDS_KEY = "rayrl_ray_ids_dir"
_FOLDER = pytest.StashKey[str]()


def starts_ray(item) -> bool:
    """The `slow` marker (pyproject.toml: tests that start Ray, Serve or vLLM) or a fixture on the session's cluster."""
    return item.get_closest_marker("slow") is not None or bool(RAY_FIXTURES & set(getattr(item, "fixturenames", ())))


def record_ray_tests(config, items) -> None:
    """On an xdist worker: write the ids of its Ray tests where the controller reads them."""
    folder = getattr(config, "workerinput", {}).get(IDS_KEY)
    if folder is None:
        return
    ids = [item.nodeid for item in items if starts_ray(item)]
    worker = config.workerinput["workerid"]
    staging = Path(folder) / f".{worker}.txt"
    staging.write_text("".join(f"{nodeid}\n" for nodeid in ids))
    os.replace(staging, Path(folder) / f"{worker}.txt")


def make_ids_folder(config) -> None:
    """On the controller of a loadgroup run: the folder workers write their Ray test ids to."""
    config.stash[_FOLDER] = tempfile.mkdtemp(prefix="rayrl-ray-ids-")


def remove_ids_folder(config) -> None:
    folder = config.stash.get(_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def ids_folder(config) -> str | None:
    return config.stash.get(_FOLDER, None)


def read_ray_ids(folder: str) -> set[str]:
    return {line for path in Path(folder).glob("*.txt") for line in path.read_text().splitlines() if line}


def make_scheduler(config, log, folder: str):
    """xdist's scope scheduler with one scope for all Ray tests and one scope per other test."""
    from xdist.scheduler import LoadScopeScheduling

    class RayGroupScheduling(LoadScopeScheduling):
        ray_ids: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # called once the workers have all sent their collections, so every worker's file is written
            if self.ray_ids is None:
                self.ray_ids = read_ray_ids(folder)
            return RAY_GROUP if nodeid in self.ray_ids else nodeid

    return RayGroupScheduling(config, log)
