"""A Python tool: runs the model's code in a separate process with a time limit, a memory limit, no network and a
scratch folder of its own (one per trajectory, removed at release).

Isolation, in layers: the process starts in a new user and network namespace (`unshare`), so it has no network
interface but loopback; `resource` limits cap its address space, CPU time and file sizes; an audit hook installed
before the code runs refuses writes outside the scratch folder, reads outside it and the standard library, and new
processes, sockets and `ctypes`. Where `unshare` cannot make the namespaces the tool refuses to start unless its config
says `sandbox: false`, which runs the code without the network namespace (the other layers stay)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Mapping

from app.agents.tool_base import BaseTool

UNSHARE_COMMAND = ("unshare", "--user", "--map-root-user", "--net")

# Runs in the child with the interpreter's -I (no site-packages, no user env): limits, then the guard, then the code.
_BOOTSTRAP = r"""
import os, resource, sys, sysconfig


def install(scratch, memory_bytes, cpu_s, file_bytes):
    for limit, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, file_bytes), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    scratch = os.path.realpath(scratch)
    readable = tuple(os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib"))
    blocked = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
               "os.kill", "os.killpg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "socket.connect", "socket.bind",
               "socket.sendto", "socket.getaddrinfo", "socket.__new__", "pty.spawn", "sys.setprofile")
    path_events = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
                   "os.truncate", "os.utime", "os.chdir", "shutil.rmtree", "shutil.copyfile", "shutil.move")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def inside(path, roots):
        path = os.path.realpath(os.fsdecode(path))
        return any(path == r or path.startswith(r + os.sep) for r in roots)

    def guard(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            writes = bool((flags or 0) & write_flags) or any(c in (mode or "") for c in "wax+")
            if inside(path, (scratch,)) or (not writes and inside(path, readable)):
                return
            raise PermissionError(f"sandbox: {os.fsdecode(path)} is outside the scratch folder")
        if event in ("os.listdir", "os.scandir"):
            where = args[0] if args else None
            if where is not None and not isinstance(where, int) and not inside(where, (scratch,) + readable):
                raise PermissionError(f"sandbox: {os.fsdecode(where)} is outside the scratch folder")
            return
        if event in blocked:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in path_events:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and not inside(arg, (scratch,)):
                    raise PermissionError(f"sandbox: {event} on {os.fsdecode(arg)} is outside the scratch folder")

    sys.addaudithook(guard)


_scratch = os.path.realpath(sys.argv[1])
with open(os.path.join(_scratch, 'main.py')) as _f:
    _source = _f.read()
install(_scratch, int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
del install
exec(compile(_source, "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


def network_namespace_available() -> tuple[bool, str]:
    """Whether `unshare` can give a process its own network namespace here, and why not."""
    try:
        done = subprocess.run([*UNSHARE_COMMAND, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{' '.join(UNSHARE_COMMAND)} could not run: {e}"
    if done.returncode != 0:
        return False, f"{' '.join(UNSHARE_COMMAND)} failed: {done.stderr.strip() or done.returncode}"
    return True, ""


class PythonSandboxTool(BaseTool):
    """Config: timeout_s (5), memory_mb (512), max_file_mb (16), argument ("code"), sandbox (true: require the
    network namespace)."""

    def __init__(self, config: Mapping[str, Any], tool_schema):
        super().__init__(config, tool_schema)
        self.timeout_s = float(self.config.get("timeout_s", 5))
        self.memory_mb = int(self.config.get("memory_mb", 512))
        self.max_file_mb = int(self.config.get("max_file_mb", 16))
        self.argument = str(self.config.get("argument", "code"))
        self.isolate_network = bool(self.config.get("sandbox", True))
        if self.isolate_network:
            ok, why = network_namespace_available()
            if not ok:
                raise RuntimeError(
                    f"tool {self.name!r}: no network namespace for the Python sandbox ({why}); run "
                    "where unprivileged user namespaces are allowed, or set `sandbox: false` in this "
                    "tool's config to run code with network access"
                )
        self._scratch: dict[str, str] = {}

    def create(self, instance_id=None, **kwargs) -> str:
        instance_id = super().create(instance_id)
        self._scratch[instance_id] = tempfile.mkdtemp(prefix="rayrl-sandbox-")
        return instance_id

    def scratch_dir(self, instance_id: str) -> str:
        return self._scratch[instance_id]

    def execute(self, instance_id: str, parameters: Mapping[str, Any], **kwargs) -> tuple[str, float, dict]:
        code = parameters.get(self.argument)
        if not isinstance(code, str):
            return f"Error: give the code as a string argument {self.argument!r}", 0.0, {"error": 1}
        scratch = self._scratch[instance_id]
        with open(os.path.join(scratch, "main.py"), "w") as f:
            f.write(code)
        command = [
            sys.executable,
            "-I",
            "-c",
            _BOOTSTRAP,
            scratch,
            str(self.memory_mb << 20),
            str(max(1, int(self.timeout_s) + 1)),
            str(self.max_file_mb << 20),
        ]
        if self.isolate_network:
            command = [*UNSHARE_COMMAND, *command]
        env = {"PATH": os.defpath, "HOME": scratch, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(
                command,
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"Error: the code ran longer than {self.timeout_s:g} s and was stopped", 0.0, {"timeout": 1}
        out = done.stdout + (("\n" if done.stdout else "") + done.stderr if done.stderr else "")
        if done.returncode != 0:
            return f"{out}\n(exit status {done.returncode})".strip(), 0.0, {"error": 1}
        return out, 0.0, {}

    def release(self, instance_id: str, **kwargs) -> None:
        shutil.rmtree(self._scratch.pop(instance_id, ""), ignore_errors=True)
