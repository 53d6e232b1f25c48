"""The MLflow save of the best model loads the folder as the trainer did: a model type of one's own registers
through the policy's external_lib first (without it transformers cannot read the folder's config)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# a fresh interpreter: a module this test process imported earlier would register the type and hide a missing import
SAVE = """
import sys
from pathlib import Path
from types import SimpleNamespace
from app.pipeline.best_model import _save_mlflow
policy = SimpleNamespace(external_lib=sys.argv[3] or None, trust_remote_code=False)
_save_mlflow(Path(sys.argv[1]), Path(sys.argv[2]), {"rayrl_step": 3}, policy)
"""


def _save(model_dir: Path, out: Path, lib: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-c", SAVE, str(model_dir), str(out), lib]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_model_type_of_ones_own_saves_once_its_external_lib_is_imported(marked_model_dir, tmp_path):
    failed = _save(marked_model_dir, tmp_path / "without", "")
    assert failed.returncode != 0 and "rayrl_marked_llama" in failed.stderr

    saved = _save(marked_model_dir, tmp_path / "mlflow", "tests.marked_llama")
    assert saved.returncode == 0, saved.stderr[-2000:]
    mlmodel = (tmp_path / "mlflow" / "MLmodel").read_text()
    assert "rayrl_step: 3" in mlmodel
    config = json.loads((tmp_path / "mlflow" / "model" / "config.json").read_text())
    assert config["model_type"] == "rayrl_marked_llama"
