"""Scoring a batch of decoded responses with a rule or custom reward function, in worker processes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from traceback import format_exc
from typing import Any, Callable, Sequence

import torch

from algos.rewards.token_level import scores_to_token_rewards
from app.rewards.custom import RewardFnSpec, load_reward_fn
from app.rewards.worker_pool import RewardWorkerPool, TaskOutcome

ON_ERROR_MODES = ("raise", "zero")


class RewardComputeError(RuntimeError):
    """A reward call failed or timed out and on_error is "raise". The message names the sample."""


@dataclass
class RewardResult:
    """Scores for one batch.

    Attributes:
        scores: one float per response (0.0 for a failed sample under on_error="zero").
        token_level_rewards: ``(batch, response_len)`` score on each response's last token, zeros elsewhere; None
            when no response lengths were given.
        metrics: ``reward/score/mean|max|min``, ``reward/errors``, ``reward/timeouts``, ``reward/extra/<key>/mean``.
        extra: per-sample values of the extra keys of dict results (None where a sample did not return the key).
        failures: sample index -> what went wrong, for samples that errored or timed out.
    """

    scores: list[float]
    token_level_rewards: torch.Tensor | None
    metrics: dict[str, float]
    extra: dict[str, list[Any]] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)


def split_score(value: Any) -> tuple[float, dict[str, Any]]:
    """A reward function's return value as (score, extra keys); ValueError when it is neither a number nor a dict
    with a numeric ``score``."""
    extra: dict[str, Any] = {}
    if isinstance(value, dict):
        if "score" not in value:
            raise ValueError(f"returned a dict without 'score' (keys: {', '.join(map(str, value))})")
        extra = {k: v for k, v in value.items() if k != "score"}
        value = value["score"]
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"returned {type(value).__name__} {value!r:.100}, not a number") from None
    if not math.isfinite(score):
        raise ValueError(f"returned a non-finite score {score}")
    return score, extra


class RewardManager:
    """Calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` for every response.

    Args:
        compute_score: a RewardFnSpec (custom_reward_function.path/.name/.reward_kwargs; path None = built-in rules)
            or a function with that signature importable by module and name.
        num_workers: worker processes; 0 runs in this process, where the time limit cannot be enforced.
        timeout_s: per-sample time limit; a sample past it has its worker killed and replaced.
        on_error: "raise" -> RewardComputeError naming the sample; "zero" -> score 0.0, counted in
            ``reward/errors`` / ``reward/timeouts``.
        max_failed_fraction: under "zero", a batch in which more than this fraction of the samples failed raises
            RewardComputeError naming the first failure (1.0: never): a broken reward function must not train a
            policy on zeros for hours.
        batched: verl's ``reward_manager=batch``: one call per batch, ``compute_score(data_sources=,
            solution_strs=, ground_truths=, extra_infos=)`` with lists, returning one score (or dict) per response;
            ``timeout_s`` then bounds that one call, and a failed call fails every sample of the batch.
    """

    def __init__(
        self,
        compute_score: RewardFnSpec | Callable[..., Any] | None = None,
        *,
        # reward_model.* keys: no defaults here, theirs are the config schema's (RewardModelConfig)
        num_workers: int,
        timeout_s: float,
        on_error: str,
        max_failed_fraction: float,
        batched: bool = False,
    ):
        if on_error not in ON_ERROR_MODES:
            raise ValueError(f"on_error must be one of {ON_ERROR_MODES}, got {on_error!r}")
        if not 0.0 <= max_failed_fraction <= 1.0:
            raise ValueError(f"max_failed_fraction must be in [0, 1], got {max_failed_fraction}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.target = compute_score if compute_score is not None else RewardFnSpec()
        # Load here as well, so a wrong path or name fails now, in this process, with a clear message.
        self._fn = load_reward_fn(self.target) if isinstance(self.target, RewardFnSpec) else self.target
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.on_error = on_error
        self.max_failed_fraction = max_failed_fraction
        self.batched = batched
        self._pool: RewardWorkerPool | None = None

    def _run(self, tasks: list[dict[str, Any]]) -> list[TaskOutcome | None]:
        if self.batched:
            return self._run_batched(tasks)
        return self._run_each(tasks)

    def _run_batched(self, tasks: list[dict[str, Any]]) -> list[TaskOutcome | None]:
        """The whole batch in one call; its list of results becomes one outcome per sample."""
        call = {
            "data_sources": [t["data_source"] for t in tasks],
            "solution_strs": [t["solution_str"] for t in tasks],
            "ground_truths": [t["ground_truth"] for t in tasks],
            "extra_infos": [t["extra_info"] for t in tasks],
        }
        [outcome] = self._run_each([call])
        if outcome is None or outcome.error is not None or outcome.timed_out:
            return [outcome] * len(tasks)
        values = outcome.value
        if not isinstance(values, (list, tuple)) or len(values) != len(tasks):
            got = f"{len(values)} results" if isinstance(values, (list, tuple)) else type(values).__name__
            return [
                TaskOutcome(
                    error=f"the batched compute_score returned {got} for {len(tasks)} responses; it "
                    "must return a list with one score (or dict) per response"
                )
            ] * len(tasks)
        return [TaskOutcome(value=v) for v in values]

    def _run_each(self, tasks: list[dict[str, Any]]) -> list[TaskOutcome | None]:
        if self.num_workers == 0:
            outcomes = []
            for task in tasks:
                try:
                    outcomes.append(TaskOutcome(value=self._fn(**task)))
                except Exception as err:
                    outcomes.append(TaskOutcome(error=f"raised {type(err).__name__}: {err}", traceback=format_exc()))
                    if self.on_error == "raise":
                        break
            return outcomes + [None] * (len(tasks) - len(outcomes))
        if self._pool is None:
            self._pool = RewardWorkerPool(self.target, self.num_workers, self.timeout_s)
        return self._pool.run(tasks, stop_on_failure=self.on_error == "raise")

    def score(
        self,
        responses: Sequence[str],
        data_sources: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict[str, Any] | None] | None = None,
        response_lengths: Sequence[int] | torch.Tensor | None = None,
        response_len: int | None = None,
    ) -> RewardResult:
        """Score ``responses`` (decoded text). With ``response_lengths`` (real tokens per right-padded response) the
        result also holds token-level rewards of width ``response_len`` (default: the longest response)."""
        n = len(responses)
        if not (len(data_sources) == len(ground_truths) == n) or (extra_infos is not None and len(extra_infos) != n):
            raise ValueError(
                f"responses ({n}), data_sources ({len(data_sources)}), ground_truths ({len(ground_truths)})"
                + (f", extra_infos ({len(extra_infos)})" if extra_infos is not None else "")
                + " must have the same length"
            )
        extra_infos = extra_infos if extra_infos is not None else [None] * n
        if isinstance(self.target, RewardFnSpec) and self.target.path is None:
            # With the built-in rules an unknown data_source is a configuration mistake, not a sample failure:
            # raise (listing the known names) whatever on_error says.
            from algos.rewards import get_reward_fn

            for data_source in set(data_sources):
                get_reward_fn(data_source)
        tasks = [
            {"data_source": ds, "solution_str": text, "ground_truth": gt, "extra_info": info}
            for text, ds, gt, info in zip(responses, data_sources, ground_truths, extra_infos)
        ]
        outcomes = self._run(tasks)

        scores = [0.0] * n
        extras: list[dict[str, Any]] = [{} for _ in range(n)]
        failures: dict[int, str] = {}
        errors = timeouts = 0
        for i, outcome in enumerate(outcomes):
            if outcome is None:  # not run: an earlier sample failed under on_error="raise"
                continue
            problem = None
            if outcome.timed_out:
                timeouts += 1
                problem = f"did not finish within {self.timeout_s:g}s (worker killed and replaced)"
            elif outcome.error is not None:
                errors += 1
                problem = outcome.error
            else:
                try:
                    scores[i], extras[i] = split_score(outcome.value)
                except ValueError as err:
                    errors += 1
                    problem = str(err)
            if problem is not None:
                failures[i] = problem
                if self.on_error == "raise":
                    raise RewardComputeError(
                        f"reward for sample {i} (data_source={data_sources[i]!r}) {problem}; set on_error='zero' "
                        "to score such samples 0 instead" + (f"\n{outcome.traceback}" if outcome.traceback else "")
                    )

        if n and len(failures) / n > self.max_failed_fraction:
            first = min(failures)
            raise RewardComputeError(
                f"{len(failures)} of {n} reward calls failed in one batch, more than max_failed_fraction="
                f"{self.max_failed_fraction:g} allows; the first, sample {first} (data_source="
                f"{data_sources[first]!r}): {failures[first]}"
            )
        extra_keys = sorted({k for e in extras for k in e})
        extra = {k: [e.get(k) for e in extras] for k in extra_keys}
        metrics = {
            "reward/score/mean": sum(scores) / n if n else 0.0,
            "reward/score/max": max(scores, default=0.0),
            "reward/score/min": min(scores, default=0.0),
            "reward/errors": float(errors),
            "reward/timeouts": float(timeouts),
        }
        for key, values in extra.items():
            numbers = [float(v) for v in values if isinstance(v, (int, float))]  # bools count as 0/1
            if numbers:
                metrics[f"reward/extra/{key}/mean"] = sum(numbers) / len(numbers)

        token_level = None
        if response_lengths is not None:
            lengths = torch.as_tensor(response_lengths, dtype=torch.long)
            width = response_len if response_len is not None else int(lengths.max()) if n else 0
            token_level = scores_to_token_rewards(scores, lengths, width)
        return RewardResult(scores, token_level, metrics, extra, failures)

    def score_token_batch(
        self,
        tokenizer: Any,
        response_ids: torch.Tensor,
        response_mask: torch.Tensor,
        data_sources: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict[str, Any] | None] | None = None,
    ) -> RewardResult:
        """Decode right-padded ``response_ids`` ``(batch, response_len)`` (``response_mask`` 1 = real token) and score
        them; token-level rewards have the same shape as ``response_ids``."""
        texts, lengths = decode_responses(tokenizer, response_ids, response_mask)
        return self.score(texts, data_sources, ground_truths, extra_infos, lengths, response_ids.shape[1])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> "RewardManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict[str, Any]:  # worker processes do not travel with the manager
        state = dict(self.__dict__)
        state["_pool"] = None
        return state


def decode_responses(
    tokenizer: Any, response_ids: torch.Tensor, response_mask: torch.Tensor
) -> tuple[list[str], list[int]]:
    """Texts of right-padded responses ``(batch, response_len)`` and their lengths (real tokens, from the mask).
    Special tokens (EOS, padding) are left out of the text."""
    lengths = response_mask.long().sum(dim=1).tolist()
    texts = tokenizer.batch_decode(
        [row[:n].tolist() for row, n in zip(response_ids, lengths)], skip_special_tokens=True
    )
    return texts, lengths
