"""model.override_config: an engine built with overrides computes what it computes from a copy of the model folder
whose config.json says the same, for FSDP2 and DeepSpeed, and its exported folder keeps them."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from support import engine_spec

from app.engine import make_engine

PROMPTS, RESPONSES = [6, 3, 5, 2], [4, 1, 3, 4]
# a field every forward reads: the RMSNorm epsilon (1e-6 in the tiny model) moves every log-prob
OVERRIDE = {"rms_norm_eps": 0.5}


def _log_probs(strategy, path, batch, **kwargs):
    engine = make_engine(strategy, engine_spec(path, optim=None, param_dtype="fp32", device="cpu", **kwargs))
    engine.init_model()
    with engine.eval_mode():
        return engine, engine.forward_backward_step(batch, forward_only=True).outputs["log_probs"]


@pytest.fixture(scope="module")
def edited_copy(tiny_llama_dir, tmp_path_factory):
    """The tiny model with OVERRIDE written into its config.json."""
    out = tmp_path_factory.mktemp("edited")
    shutil.copytree(tiny_llama_dir, out, dirs_exist_ok=True)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **OVERRIDE}))
    return out


@pytest.mark.parametrize("strategy", ["fsdp2", "deepspeed"])
def test_an_override_computes_as_the_edited_config_does(strategy, tiny_llama_dir, edited_copy, make_rl_batch):
    batch = make_rl_batch(PROMPTS, RESPONSES)
    _, plain = _log_probs(strategy, tiny_llama_dir, batch)
    engine, overridden = _log_probs(strategy, tiny_llama_dir, batch, model_overrides=OVERRIDE)
    _, edited = _log_probs(strategy, edited_copy, batch)
    assert engine.model.config.rms_norm_eps == 0.5
    assert (overridden - plain).abs().max() > 1e-3  # the override changed what the model computes
    torch.testing.assert_close(overridden, edited, rtol=0, atol=0)


def test_the_exported_folder_keeps_the_override(tiny_llama_dir, tmp_path):
    engine = make_engine(
        "fsdp2", engine_spec(tiny_llama_dir, optim=None, param_dtype="fp32", device="cpu", model_overrides=OVERRIDE)
    )
    engine.init_model()
    engine.export_hf(str(tmp_path / "hf"))
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["rms_norm_eps"] == 0.5
