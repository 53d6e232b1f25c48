"""A GSM8K-style interaction: after each answer it checks the number after `####` (or the last number, with
`method: flexible`) against the row's `interaction_kwargs["ground_truth"]`; a right answer ends the episode with turn
score 1, a wrong or missing one gets `retry_message` and turn score 0, so the model may try again until the turn
limits or the budget end the trajectory. `calculate_score` is the score of the latest answer."""

from __future__ import annotations

import threading
from typing import Any, Mapping, Optional

from algos.rewards.gsm8k import METHODS, compute_score
from app.agents.interaction_base import BaseInteraction

RETRY = "Your answer is not correct. Check your work and try again; end with '#### <answer>'."
CORRECT = "Your answer is correct."


class Gsm8kInteraction(BaseInteraction):
    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.method = self.config.get("method", "strict")
        if self.method not in METHODS:
            raise ValueError(f"config.method={self.method!r}: one of {METHODS}")
        self.retry_message = str(self.config.get("retry_message", RETRY))
        self.correct_message = str(self.config.get("correct_message", CORRECT))
        self._state: dict[str, dict[str, Any]] = {}  # instance id -> {ground_truth, score}
        self._lock = threading.Lock()

    async def start_interaction(self, instance_id: Optional[str] = None, ground_truth: Any = None, **kwargs) -> str:
        if ground_truth is None:
            raise ValueError(
                f"interaction {self.name!r} needs the row's extra_info['interaction_kwargs']['ground_truth']"
            )
        instance_id = await super().start_interaction(instance_id)
        with self._lock:
            self._state[instance_id] = {"ground_truth": str(ground_truth), "score": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict[str, Any]]:
        answer = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "")
        state = self._state[instance_id]
        state["score"] = compute_score(answer, state["ground_truth"], method=self.method)
        if state["score"] == 1.0:
            return True, self.correct_message, 1.0, {}
        return False, self.retry_message, 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        return self._state[instance_id]["score"]

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        with self._lock:
            self._state.pop(instance_id, None)
