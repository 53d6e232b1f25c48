"""The policy's tokenizer loads (from model.tokenizer_path, else the model folder), has the chat template every
prompt goes through (a row's prompt is a list of chat messages, or a string made one user message; app.data renders
both with the template) and, when given apart from the model, no token the model cannot embed."""

from __future__ import annotations

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError


def check_tokenizer(cfg: TrainerRunConfig) -> None:
    from transformers import AutoTokenizer

    model = cfg.actor_rollout_ref.model
    key = "actor_rollout_ref.model." + ("tokenizer_path" if model.tokenizer_path else "path")
    folder = model.tokenizer_folder
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=model.trust_remote_code)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for a folder it cannot read
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PreflightError(
            f"{key}={folder}: its tokenizer cannot be loaded ({first}); the folder needs "
            "tokenizer.json or tokenizer_config.json with the vocabulary files"
        ) from None
    if model.tokenizer_path:
        check_vocabulary_fits(tokenizer, cfg)
    if model.custom_chat_template:
        check_custom_template(tokenizer, model.custom_chat_template)
        return
    if not getattr(tokenizer, "chat_template", None):
        raise PreflightError(
            f"{key}={folder}: its tokenizer has no chat template, which the prompts of data.train_files need "
            "(chat messages, data.prompt_key); use an instruct/chat model, or add a `chat_template` to its "
            "tokenizer_config.json (or a chat_template.jinja file beside it)"
        )


def check_vocabulary_fits(tokenizer, cfg: TrainerRunConfig) -> None:
    """A tokenizer given apart from the model (`model.tokenizer_path`) makes no token id the model has no embedding
    for: such an id fails only in the first forward pass that meets it, an index error on a GPU."""
    from app.engine.hf_model import load_config
    from app.roles.factory import actor_engine_spec

    arr = cfg.actor_rollout_ref
    model = arr.model
    # the config the train workers build, model.override_config set on it
    config = load_config(actor_engine_spec(model, arr.actor, seed=0, rollout_n=arr.rollout.n))
    rows = getattr(config.get_text_config(), "vocab_size", None)
    if rows is not None and len(tokenizer) > rows:
        raise PreflightError(
            f"actor_rollout_ref.model.tokenizer_path={model.tokenizer_path}: its tokenizer has {len(tokenizer)} "
            f"tokens, but the model at actor_rollout_ref.model.path={model.path} embeds only {rows} (vocab_size), "
            f"so ids {rows}-{len(tokenizer) - 1} would have no embedding; give the tokenizer the model was trained "
            "with, or drop the key to use the model folder's own"
        )


def check_custom_template(tokenizer, template: str) -> None:
    """`actor_rollout_ref.model.custom_chat_template` renders a conversation with this tokenizer."""
    conversation = [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}]
    try:
        tokenizer.apply_chat_template(conversation, chat_template=template, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001  jinja2's TemplateSyntaxError, UndefinedError, ...: all name the flaw
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PreflightError(
            f"actor_rollout_ref.model.custom_chat_template: the template does not render a conversation "
            f"({type(exc).__name__}: {first}); give a Jinja chat template as in a tokenizer_config.json"
        ) from None
