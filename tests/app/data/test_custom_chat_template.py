"""`actor_rollout_ref.model.custom_chat_template` (verl's key): the run's prompts go through it instead of the
tokenizer's template, the live policy's chat route uses it, and a template that cannot render a conversation is
named before Ray starts."""

import asyncio

import pytest
from support import with_dotted

from app.config import load_config
from app.preflight import PreflightError
from app.preflight.tokenizer import check_tokenizer
from app.trainer.setup import load_datasets, load_tokenizer
from serve.openai_routes import OpenAIRoutes
from serve.replica_gate import ReplicaGate

PLAIN = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


def _cfg(smollm2_dir, data_files, **extra):
    path = data_files.parquet("train.parquet", data_files.verl_rows(2))
    base = {"data": {"train_files": str(path)}, "actor_rollout_ref": {"model": {"path": str(smollm2_dir)}}}
    return load_config(with_dotted(base, **extra))


def test_the_prompts_are_templated_with_it(smollm2_dir, data_files):
    cfg = _cfg(smollm2_dir, data_files, **{"actor_rollout_ref.model.custom_chat_template": PLAIN})
    tokenizer = load_tokenizer(cfg)
    train, _ = load_datasets(cfg, tokenizer)
    assert tokenizer.decode(train[1].prompt_ids) == "[user] What is 1 + 0?\n[assistant] "
    check_tokenizer(cfg)  # renders


def test_a_template_that_cannot_render_is_named(smollm2_dir, data_files):
    cfg = _cfg(smollm2_dir, data_files, **{"actor_rollout_ref.model.custom_chat_template": "{% for m in messages %}"})
    with pytest.raises(
        PreflightError, match=r"^actor_rollout_ref\.model\.custom_chat_template: the template does not render"
    ):
        check_tokenizer(cfg)


def test_the_live_policys_chat_route_uses_it(smollm2_dir):
    routes = OpenAIRoutes(
        engine=None,
        gate=ReplicaGate("r1"),
        replica="r1",
        served_model_name="policy",
        tokenizer_path=str(smollm2_dir),
        api_key=None,
        version=lambda: 0,
        chat_template=PLAIN,
    )
    tokenizer = asyncio.run(routes._chat_tokenizer())
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "[user] hi\n[assistant] "
