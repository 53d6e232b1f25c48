"""How to turn rows into prompts: the data.* settings this package uses, as one small dataclass."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from app.data.errors import DataError

TRUNCATION_MODES = ("error", "left", "right", "middle")
# apply_chat_template's own arguments, which the trainer sets: a template variable of the same name never reaches it
TEMPLATE_ARGUMENTS = (
    "conversation",
    "tools",
    "tokenize",
    "add_generation_prompt",
    "continue_final_message",
    "return_dict",
)


def check_template_kwargs(kwargs: Mapping[str, Any]) -> None:
    """DataError naming a `data.apply_chat_template_kwargs` key that is one of apply_chat_template's own arguments."""
    taken = [key for key in kwargs if key in TEMPLATE_ARGUMENTS]
    if taken:
        raise DataError(
            f"data.apply_chat_template_kwargs.{taken[0]}: the trainer sets apply_chat_template's {taken[0]} itself; "
            "the mapping holds the chat template's own variables (e.g. enable_thinking)"
        )


@dataclass
class PromptDataOptions:
    """Field names are verl's ``data.*`` keys (plus ``extra_info_key``). The ``data.*`` fields have no default: theirs
    are the config schema's (``app.config.schema.DataConfig``), written once there; ``from_mapping`` takes every one
    from the typed ``cfg.data``.

    Attributes:
        prompt_key: column with a list of chat messages or a plain string (wrapped as one user message).
        system_prompt: prepended as a system message to rows that do not start with one.
        ground_truth_key: dotted path to the ground truth, e.g. ``reward_model.ground_truth`` or ``solution``;
            None when the data has none (reward-model only).
        reward_fn_key: column naming the data source that picks the reward function.
        default_data_source: used when the file has no ``reward_fn_key`` column; without it that is an error.
        max_prompt_length: longest templated prompt, in tokens.
        filter_overlong_prompts: drop longer prompts (and report how many) instead of truncating.
        truncation: for longer prompts when not filtering: ``error`` (name file, row and length), ``left`` (keep the
            end), ``right`` (keep the start), ``middle`` (keep both ends).
        apply_chat_template_kwargs: more variables for the chat template (e.g. ``{"enable_thinking": False}``).
        extra_info_key: column with per-row metadata passed to reward functions (not a config key).
    """

    prompt_key: str
    system_prompt: str | None
    ground_truth_key: str | None
    reward_fn_key: str
    default_data_source: str | None
    max_prompt_length: int
    filter_overlong_prompts: bool
    truncation: str
    apply_chat_template_kwargs: Mapping[str, Any]
    extra_info_key: str = "extra_info"

    def __post_init__(self) -> None:
        if self.truncation not in TRUNCATION_MODES:
            raise DataError(f"data.truncation={self.truncation!r}; choose one of {', '.join(TRUNCATION_MODES)}")
        if not isinstance(self.max_prompt_length, int) or self.max_prompt_length <= 0:
            raise DataError(f"data.max_prompt_length must be a positive integer, got {self.max_prompt_length!r}")
        if not self.prompt_key:
            raise DataError("data.prompt_key is empty")
        check_template_kwargs(self.apply_chat_template_kwargs)

    @classmethod
    def from_mapping(cls, source: Mapping[str, Any] | Any) -> "PromptDataOptions":
        """Build from any mapping or object with these attribute names (e.g. the typed ``cfg.data``); other keys are
        ignored. A ``data.*`` key it lacks is a DataError: its default is the schema's, not restated here."""
        mapping = isinstance(source, Mapping)

        def has(name: str) -> bool:
            return name in source if mapping else hasattr(source, name)

        missing = [f"data.{f.name}" for f in fields(cls) if f.default is MISSING and not has(f.name)]
        if missing:
            raise DataError(
                f"the data settings lack {', '.join(missing)}: build them from the typed config's data "
                "section (app.config.schema.DataConfig), which has every key"
            )
        return cls(
            **{f.name: source[f.name] if mapping else getattr(source, f.name) for f in fields(cls) if has(f.name)}
        )
