"""How the suite runs in two xdist workers (tests/conftest.py): the Ray tests form one group, a folder a session
fixture builds is built under a lock that another process waits on, and a test's own listener port lies outside the
ports the kernel hands to a bind of port 0."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ray_group import RAY_GROUP, make_scheduler, starts_ray
from support import TEST_PORTS, building, free_port

TRY_LOCK = """
import sys
from filelock import FileLock, Timeout
try:
    FileLock(sys.argv[1], timeout=0).acquire()
except Timeout:
    sys.exit(3)
"""


class Item:
    """What the collection hook reads and writes of a pytest item."""

    def __init__(self, markers=(), fixturenames=()):
        self.markers = [pytest.Mark(name, (), {}) for name in markers]
        self.fixturenames = list(fixturenames)

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, decorator):
        self.markers.append(decorator.mark)


class TwoWorkers:
    """The one option xdist's scheduler reads when it is made: `-n 2`."""

    def getvalue(self, name):
        assert name == "tx", name
        return ["2*popen"]


def test_slow_tests_and_tests_on_the_session_cluster_start_ray_and_no_other_does():
    assert (
        starts_ray(Item(["slow"]))
        and starts_ray(Item([], ["ray_cluster"]))
        and starts_ray(Item([], ["a", "ray_cluster"]))
    )
    assert not starts_ray(Item()) and not starts_ray(Item(["parametrize"], ["tmp_path"]))


def test_the_scheduler_makes_one_unit_of_the_ray_tests_the_workers_wrote(tmp_path):
    (tmp_path / "gw0.txt").write_text("t.py::test_a\nt.py::test_b[1]\n")
    (tmp_path / "gw1.txt").write_text("t.py::test_a\nt.py::test_b[1]\n")
    scheduler = make_scheduler(TwoWorkers(), None, str(tmp_path))
    scopes = [scheduler._split_scope(n) for n in ("t.py::test_a", "t.py::test_b[1]", "t.py::test_c", "u.py::test_a")]
    assert scopes == [RAY_GROUP, RAY_GROUP, "t.py::test_c", "u.py::test_a"]


def test_another_process_cannot_take_the_lock_while_a_folder_is_built(tmp_path):
    out = tmp_path / "model"
    lock = str(tmp_path / "model.lock")
    with building(out):
        held = subprocess.run([sys.executable, "-c", TRY_LOCK, lock], timeout=60)
    free = subprocess.run([sys.executable, "-c", TRY_LOCK, lock], timeout=60)
    assert (held.returncode, free.returncode) == (3, 0)


def test_a_free_port_lies_outside_the_kernels_ephemeral_range_and_is_bindable():
    import socket
    from pathlib import Path

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    port = free_port()
    assert port in TEST_PORTS and port < low
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # still free: nothing drawing ephemeral ports can have taken it
