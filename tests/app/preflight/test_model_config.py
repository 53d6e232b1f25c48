"""Each model folder's config reads in transformers before Ray starts, or the run is refused naming the key and the
two ways a model type transformers lacks becomes known (external_lib, trust_remote_code)."""

import json
import shutil

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_config import check_model_configs


def _cfg(path):
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.model.path = str(path)
    return cfg


def test_a_known_model_type_passes(tiny_model_dir):
    check_model_configs(_cfg(tiny_model_dir))


def test_a_folder_with_its_own_code_is_refused_without_trust_remote_code(tiny_model_dir, tmp_path):
    folder = tmp_path / "own-code"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config |= {"model_type": "rayrl_own_code", "auto_map": {"AutoConfig": "configuration_own.OwnConfig"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_own.py").write_text(
        "from transformers import LlamaConfig\n\nclass OwnConfig(LlamaConfig):\n    model_type = 'rayrl_own_code'\n"
    )
    with pytest.raises(
        PreflightError,
        match=r"^actor_rollout_ref\.model\.path=.*own-code: transformers cannot read its config .*"
        r"actor_rollout_ref\.model\.trust_remote_code=true$",
    ):
        check_model_configs(_cfg(folder))
    cfg = _cfg(folder)
    cfg.actor_rollout_ref.model.trust_remote_code = True
    check_model_configs(cfg)
