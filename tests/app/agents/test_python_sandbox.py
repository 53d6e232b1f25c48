import os
import subprocess
import sys

import pytest

from app.agents.tool_base import FunctionSchema, ToolSchema
from app.agents.tools import python_sandbox
from app.agents.tools.python_sandbox import PythonSandboxTool, network_namespace_available

HAS_NETNS, WHY_NOT = network_namespace_available()
SCHEMA = ToolSchema(FunctionSchema("python"))


@pytest.fixture
def sandbox():
    if not HAS_NETNS:
        pytest.skip(f"this platform gives no network namespace ({WHY_NOT}); test_refuses_to_start_* covers it")
    tool = PythonSandboxTool({"timeout_s": 3, "memory_mb": 256}, SCHEMA)
    instance = tool.create()
    yield tool, instance
    tool.release(instance)


def run(sandbox, code):
    tool, instance = sandbox
    return tool.execute(instance, {"code": code})


def test_runs_code_and_keeps_files_in_its_scratch_folder(sandbox):
    assert run(sandbox, "print(sum(range(10)))") == ("45\n", 0.0, {})
    assert run(sandbox, "open('notes.txt', 'w').write('kept')")[2] == {}
    assert run(sandbox, "import json; print(json.dumps(open('notes.txt').read()))")[0] == '"kept"\n'


@pytest.mark.parametrize(
    "code, refused",
    [
        ("open('/etc/hostname').read()", "/etc/hostname is outside the scratch folder"),
        ("open('../escape.txt', 'w')", "escape.txt is outside the scratch folder"),
        ("import os; os.listdir('/')", "sandbox: / is outside the scratch folder"),
        ("import os; os.remove('/tmp/x')", "os.remove on /tmp/x is outside the scratch folder"),
        ("import subprocess; subprocess.run(['true'])", "subprocess.Popen is not allowed"),
        ("import os; os.system('true')", "os.system is not allowed"),
        ("import socket; socket.socket().connect(('10.0.0.1', 80))", "socket.__new__ is not allowed"),
        ("import urllib.request; urllib.request.urlopen('http://10.0.0.1')", "socket.getaddrinfo is not allowed"),
    ],
)
def test_refuses_files_outside_processes_and_network(sandbox, code, refused):
    text, _, metrics = run(sandbox, code)
    assert refused in text and metrics == {"error": 1}


def test_time_and_memory_limits(sandbox):
    assert run(sandbox, "while True: pass") == (
        "Error: the code ran longer than 3 s and was stopped",
        0.0,
        {"timeout": 1},
    )
    text, _, metrics = run(sandbox, "x = bytearray(1 << 30)")  # 1 GiB over a 256 MiB address-space limit
    assert "MemoryError" in text and metrics == {"error": 1}


def test_the_namespace_has_no_network():
    """Beneath the audit hook: a socket opened in the namespace reaches no address (no interface but loopback)."""
    if not HAS_NETNS:
        pytest.skip(f"this platform gives no network namespace ({WHY_NOT})")
    probe = "import socket; s = socket.socket(); s.settimeout(5); print(s.connect_ex(('10.0.0.1', 80)))"
    done = subprocess.run(
        [*python_sandbox.UNSHARE_COMMAND, sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "101"  # ENETUNREACH


def test_release_removes_the_scratch_folder(sandbox):
    tool, instance = sandbox
    other = tool.create()
    folder = tool.scratch_dir(other)
    tool.release(other)
    assert not os.path.exists(folder)


def test_refuses_to_start_without_a_network_namespace(monkeypatch):
    monkeypatch.setattr(python_sandbox, "UNSHARE_COMMAND", ("/nonexistent/unshare", "--net"))
    with pytest.raises(RuntimeError, match="set `sandbox: false`"):
        PythonSandboxTool({}, SCHEMA)
    tool = PythonSandboxTool({"sandbox": False, "timeout_s": 10}, SCHEMA)  # the explicit opt-out runs the code
    instance = tool.create()
    try:
        assert tool.execute(instance, {"code": "print(6 * 7)"})[0] == "42\n"
        assert "outside the scratch folder" in tool.execute(instance, {"code": "open('/etc/hostname')"})[0]
    finally:
        tool.release(instance)
