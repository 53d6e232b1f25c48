"""A replica's console: vLLM's import-time notice about Triton (no CPU backend) is held back unless RAYRL_VERBOSE;
the import runs in a fresh interpreter (this one has imported vLLM already) whose root handler stands for Serve's."""

import logging
import os
import subprocess
import sys

FIRST_IMPORT = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
if sys.argv[1] == "held":
    from serve.log_config import hold_vllm_import_notices
    hold_vllm_import_notices()
from vllm.engine.arg_utils import EngineArgs
"""


def _stderr(mode: str) -> str:
    env = {**os.environ, "RAYRL_VERBOSE": ""}
    done = subprocess.run(
        [sys.executable, "-c", FIRST_IMPORT, mode], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_triton_notice_of_vllms_first_import_is_held():
    notice = "Triton is installed, but doesn't include CPU backend"
    assert notice in _stderr("plain")  # what a replica printed before (this CPU build of vLLM prints it)
    assert notice not in _stderr("held")


def test_a_verbose_run_keeps_the_notices(monkeypatch):
    from serve.log_config import VLLM_IMPORT_NOTICE_LOGGERS, hold_vllm_import_notices

    monkeypatch.setenv("RAYRL_VERBOSE", "1")
    loggers = [logging.getLogger(name) for name in VLLM_IMPORT_NOTICE_LOGGERS]
    levels = [logger.level for logger in loggers]
    hold_vllm_import_notices()
    assert [logger.level for logger in loggers] == levels
