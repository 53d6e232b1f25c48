"""The roles tests use the engine tests' tiny model and batch fixtures (loaded from that conftest by path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "engine" / "conftest.py"
_spec = importlib.util.spec_from_file_location("engine_test_fixtures", _path)
_engine_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_engine_fixtures)

tiny_llama_dir = _engine_fixtures.tiny_llama_dir
make_rl_batch = _engine_fixtures.make_rl_batch
