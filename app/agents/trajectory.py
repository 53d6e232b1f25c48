"""One trajectory as one training sequence: the prompt, then everything after it (the model's turns, the template
glue, tool results and interaction turns between them) as the response. `response_mask` is 1 on the model's own
tokens and 0 on the rest; `response_logprobs` holds the sampler's log-probs on the model's tokens and 0 elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence


@dataclass
class Trajectory:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "max_assistant_turns" | "max_user_turns" | "abort"
    assistant_turns: int = 0
    tool_turns: int = 0
    tool_calls: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)  # error kind -> count
    tool_calls_ok: int = 0  # calls that parsed, reached their tool and came back without an error (its own included)
    tool_rewards: dict[str, float] = field(default_factory=dict)  # tool name -> calc_reward at the end
    interaction_turns: int = 0  # user turns the interaction wrote (its last one too, when it ended the episode)
    turn_scores: list[float] = field(default_factory=list)  # the interaction's score of each of those turns
    interaction_score: Optional[float] = None  # its calculate_score at the end; None: no interaction
    turns: list[dict[str, Any]] = field(default_factory=list)  # {"role", "content"} of each turn after the prompt

    def add_model_tokens(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled tokens but {len(logprobs)} log-probs")
        self.response_ids += list(ids)
        self.response_mask += [1] * len(ids)
        self.response_logprobs += [float(x) for x in logprobs]

    def add_context_tokens(self, ids: Sequence[int]) -> None:
        """Tokens the model did not sample (tool results, interaction turns, template glue): context only."""
        self.response_ids += list(ids)
        self.response_mask += [0] * len(ids)
        self.response_logprobs += [0.0] * len(ids)

    @property
    def model_token_count(self) -> int:
        return sum(self.response_mask)

    @property
    def user_turns(self) -> int:
        """What `max_user_turns` counts: tool-result turns and interaction turns."""
        return self.tool_turns + self.interaction_turns

    @property
    def tool_error_count(self) -> int:
        return sum(self.tool_errors.values())
