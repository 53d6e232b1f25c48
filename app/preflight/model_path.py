"""The model folders a run loads (policy, critic, reward model) exist as local Hugging Face folders with weights.

A hub id is used only when a copy is in the local Hugging Face cache (nothing is downloaded here); otherwise the
message says how to make a local folder with `python -m app.import_model`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_sections import built_model_sections

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_model_paths(cfg: TrainerRunConfig) -> None:
    for section, model in built_model_sections(cfg):
        check_model_path(f"{section}.path", model.path)


def check_model_path(key: str, path: str) -> None:
    """PreflightError naming `key` when `path` is neither a local model folder with weights nor a cached hub id."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        _check_folder(key, path, folder)
    elif folder.exists():
        hint = _import_hint(path, folder.stem) if folder.suffix == ".gguf" else ""
        raise PreflightError(
            f"{key}={path} is a file, not a model folder (a Hugging Face folder with config.json "
            f"and weights){hint or '; give the folder that holds it'}"
        )
    elif _HUB_ID.match(path) and not path.startswith((".", "~")):
        if _cached_snapshot(path) is None:
            out = _output_folder(path.split("/")[-1])
            raise PreflightError(
                f"{key}={path} is not a local folder, and the hub id {path} has no copy in the local Hugging Face "
                f"cache (nothing is downloaded here): download it where there is network (`huggingface-cli download "
                f"{path}`, then copy the cache folder here), then run `python -m app.import_model --source {path} "
                f"--output {out}` and set {key}={out}"
            )
    else:
        raise PreflightError(
            f"{key}={path}: no such folder; give a local Hugging Face model folder"
            f"{_import_hint('<a .gguf file or Hugging Face folder>', folder.name or 'model')}"
        )


def _check_folder(key: str, path: str, folder: Path) -> None:
    config = folder / "config.json"
    if not config.is_file():
        raise PreflightError(
            f"{key}={path} is a folder without config.json, so not a Hugging Face model folder"
            f"{_import_hint('<a .gguf file or Hugging Face folder>', folder.name)}"
        )
    try:
        parsed = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PreflightError(f"{key}={path}: {config} is not valid JSON ({exc})") from None
    if not isinstance(parsed, dict) or "model_type" not in parsed:
        raise PreflightError(f"{key}={path}: {config} has no model_type, so it is not a Hugging Face model config")
    if not any((folder / name).is_file() for name in WEIGHT_FILES) and not any(folder.glob("*.safetensors")):
        raise PreflightError(
            f"{key}={path} has config.json but no weights ({', '.join(WEIGHT_FILES[:3])}); copy the whole model folder"
        )


def _cached_snapshot(repo_id: str):
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached, or cached incompletely: either way not usable offline
        return None


def _output_folder(name: str) -> str:
    return "models/" + re.sub(r"[^A-Za-z0-9._-]+", "-", name).lower()


def _import_hint(source: str, name: str) -> str:
    out = _output_folder(name)
    return f"; make one with `python -m app.import_model --source {source} --output {out}` and set the key to {out}"
