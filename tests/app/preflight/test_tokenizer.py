"""actor_rollout_ref.model.tokenizer_path (verl's key): the run's tokenizer comes from it when the model folder has
none, and a tokenizer that cannot load, or that makes ids the model cannot embed, is named before Ray starts."""

import pytest
from support import weights_only_copy

from app.config import load_config
from app.preflight import PreflightError
from app.preflight.tokenizer import check_tokenizer
from app.trainer.setup import load_tokenizer


@pytest.fixture()
def weights_only_dir(tiny_model_dir, tmp_path):
    return weights_only_copy(tiny_model_dir, tmp_path / "weights-only")


def _cfg(path, tokenizer_path=None):
    model = {"path": str(path), "tokenizer_path": str(tokenizer_path) if tokenizer_path else None}
    return load_config({"data": {"train_files": "train.parquet"}, "actor_rollout_ref": {"model": model}})


def test_a_model_folder_without_a_tokenizer_runs_with_tokenizer_path(weights_only_dir, smollm2_dir):
    with pytest.raises(PreflightError, match=rf"^actor_rollout_ref\.model\.path={weights_only_dir}: its tokenizer "):
        check_tokenizer(_cfg(weights_only_dir))
    cfg = _cfg(weights_only_dir, tokenizer_path=smollm2_dir)
    check_tokenizer(cfg)
    tokenizer = load_tokenizer(cfg)
    assert tokenizer.name_or_path == str(smollm2_dir)
    assert tokenizer.chat_template  # SmolLM2's, which the prompts go through


def test_a_tokenizer_path_that_holds_no_tokenizer_is_named(tiny_model_dir, weights_only_dir):
    with pytest.raises(
        PreflightError,
        match=rf"^actor_rollout_ref\.model\.tokenizer_path={weights_only_dir}: its tokenizer cannot be loaded",
    ):
        check_tokenizer(_cfg(tiny_model_dir, tokenizer_path=weights_only_dir))


def test_a_tokenizer_with_more_tokens_than_the_model_embeds_is_named(model_dir, smollm2_dir):
    # model_dir's Llama embeds 64 tokens; SmolLM2's tokenizer makes ids up to 49151
    with pytest.raises(
        PreflightError,
        match=rf"tokenizer_path={smollm2_dir}: its tokenizer has 49152 tokens, but the model at "
        rf"actor_rollout_ref\.model\.path={model_dir} embeds only 64 \(vocab_size\), so ids 64-49151 would have no "
        "embedding",
    ):
        check_tokenizer(_cfg(model_dir, tokenizer_path=smollm2_dir))
