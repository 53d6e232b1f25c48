"""Templating and tokenizing prompts, and fitting them into max_prompt_length."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from app.data.errors import DataError


def render_prompts(
    tokenizer: Any, conversations: Sequence[list[dict[str, str]]], template_kwargs: Optional[Mapping[str, Any]] = None
) -> list[str]:
    """Each conversation through the tokenizer's chat template, ending with the assistant generation prompt;
    `template_kwargs`: more variables for the template (`data.apply_chat_template_kwargs`)."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise DataError(f"tokenizer {name} has no chat template; prompts cannot be formatted as chat")
    return [
        tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
        for c in conversations
    ]


def tokenize_prompts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of already-templated texts (the template carries any BOS, so none is added here)."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def truncate_ids(ids: list[int], max_length: int, mode: str) -> list[int]:
    """Shorten ``ids`` to ``max_length``: ``left`` drops the start, ``right`` drops the end, ``middle`` keeps the first
    ceil(max/2) and last floor(max/2) tokens."""
    if len(ids) <= max_length:
        return ids
    if mode == "left":
        return ids[len(ids) - max_length :]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        head = (max_length + 1) // 2
        tail = max_length - head
        return ids[:head] + (ids[len(ids) - tail :] if tail else [])
    raise ValueError(f"truncate_ids: mode must be left/right/middle, got {mode!r}")
