"""What the loop needs from the services it is handed: the rollout deployment and the reward step."""
from __future__ import annotations

from typing import Any, Protocol


class RolloutService(Protocol):
    """What the loop needs from the rollout deployment (`serve.RolloutClient`)."""

    def generate(self, prompt_token_ids: list[list[int]], *, expect_version: int,
                 validation: bool = False) -> list[Any]: ...
    # payload: serve.types.FullWeights (its tensors a one-pass stream of (name, tensor) that must be read to the end:
    # every rank's gathers advance with it) or LoraAdapter
    def update_weights(self, version: int, payload: Any) -> Any: ...
    def replica_versions(self) -> dict[str, int]: ...
    def sleep(self) -> None: ...
    def wake_up(self) -> None: ...
    # (replicas seen dying, calls resent) since the last call
    def take_faults(self) -> tuple[set[str], int]: ...


class RewardScorer(Protocol):
    """What the loop needs from the reward step (`app.trainer.scoring.Scorer`)."""

    def score(self, responses: list[str], data_sources: list[str], ground_truths: list[Any],
              extra_infos: list[dict], messages: list[list[dict]]
              ) -> tuple[list[float], dict[str, float], dict[str, list[Any]]]: ...
