"""The tokens that follow an assistant turn that called tools: the rest of the assistant message after its stop
token, the tool messages and the next assistant header, as the model's chat template writes them. Only these new
tokens are templated, so the tokens the model sampled are kept exactly as it sampled them."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

_SYSTEM, _USER, _ASSISTANT = "<<system>>", "<<user>>", "<<assistant>>"


class ChatGlue:
    """`template_kwargs`: more variables for the chat template (`data.apply_chat_template_kwargs`), as the prompts."""

    def __init__(self, tokenizer, template_kwargs: Optional[Mapping[str, Any]] = None):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self._base = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": _ASSISTANT},
        ]
        self._base_text = self._render(self._base, add_generation_prompt=False)
        if _ASSISTANT not in self._base_text:
            raise ValueError(
                "the tokenizer's chat template drops assistant messages; multi-turn rollouts need a "
                "template that writes them"
            )
        # what the template writes after an assistant message's content: its end token, then glue ("\n" in ChatML)
        self._after_assistant = self._base_text[self._base_text.rindex(_ASSISTANT) + len(_ASSISTANT) :]

    def _render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **self.template_kwargs
        )

    def after_turn(self, last_token_id: int, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Token ids to append after an assistant turn that ended with `last_token_id` (its stop token): the end of
        that message, `messages` (tool or user turns) and the header of the next assistant turn."""
        stop_text = self.tokenizer.decode([last_token_id])
        rest = self._after_assistant
        if stop_text and rest.startswith(stop_text):
            rest = rest[len(stop_text) :]
        full = self._render(self._base + list(messages), add_generation_prompt=True)
        if not full.startswith(self._base_text):
            raise ValueError(
                "the chat template rewrites earlier turns when messages are added; multi-turn rollouts "
                "need a template that appends"
            )
        return self.tokenizer.encode(rest + full[len(self._base_text) :], add_special_tokens=False)
