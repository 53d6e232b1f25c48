"""verl's GSM8K answer-checking tool (`calc_gsm8k_reward`, verl's examples/sglang_multiturn tool config): the model
submits its final answer as the tool's `answer` argument and reads back whether it is right, so it may try again.

Per trajectory, `create` takes the row's ground truth (verl's `extra_info.tools_kwargs.calc_gsm8k_reward
.create_kwargs.ground_truth`, which `python -m app.prepare gsm8k` writes). Each call scores the answer as a
`#### <answer>` line with the flexible GSM8K rule (1 right, 0 otherwise); its step reward is 0 when the score rose and
-0.05 when it did not (a repeated or worse submission), and `calc_reward` is the latest submission's score, as in
verl."""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional

from algos.rewards.gsm8k import compute_score
from app.agents.tool_base import BaseTool

NO_GAIN_PENALTY = -0.05  # verl's step reward for a submission that does not raise the score


class Gsm8kTool(BaseTool):
    """Tool config: `class_name: app.agents.tools.gsm8k.Gsm8kTool` (verl's `verl.tools.gsm8k_tool.Gsm8kTool` names
    it too), schema with one string parameter `answer`."""

    def __init__(self, config: Mapping[str, Any], tool_schema) -> None:
        super().__init__(config, tool_schema)
        self._state: dict[str, dict[str, Any]] = {}  # instance id -> {ground_truth, response, reward}
        self._lock = threading.Lock()

    def create(self, instance_id: Optional[str] = None, ground_truth: Any = None, **kwargs) -> str:
        if ground_truth is None:
            raise ValueError(
                f"tool {self.name!r} needs the row's extra_info['tools_kwargs'][{self.name!r}]['create_kwargs']"
                "['ground_truth']"
            )
        instance_id = super().create(instance_id)
        with self._lock:
            self._state[instance_id] = {"ground_truth": str(ground_truth), "response": "", "reward": 0.0}
        return instance_id

    def execute(self, instance_id: str, parameters: Mapping[str, Any], **kwargs) -> tuple[str, float, dict]:
        answer = parameters.get("answer", "") if isinstance(parameters, Mapping) else ""
        answer = answer if isinstance(answer, str) else str(answer)
        with self._lock:
            state = self._state[instance_id]
            state["response"] = answer if answer.startswith("#### ") else "#### " + answer
            reward = self._score(state)
            step_reward = 0.0 if reward > state["reward"] else NO_GAIN_PENALTY
            state["reward"] = reward
        return f"Current parsed {answer=} {reward=}", step_reward, {}

    def calc_reward(self, instance_id: str, **kwargs) -> float:
        with self._lock:
            return self._score(self._state[instance_id])

    def release(self, instance_id: str, **kwargs) -> None:
        with self._lock:
            self._state.pop(instance_id, None)

    @staticmethod
    def _score(state: Mapping[str, Any]) -> float:
        return compute_score(state["response"], state["ground_truth"], method="flexible", format_score=0.0, score=1.0)
