"""The loop's reward step: rule / custom functions in worker processes, or a reward model when enabled, then the
reward shaping the config asks for (DAPO's overlong penalty) and the scores as token-level rewards.

As in verl, an enabled reward model gives the reward; the rule functions are not added on top.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from algos.rewards.overlong import overlong_penalty
from algos.rewards.token_level import scores_to_token_rewards
from app.config.schema import OverlongBufferConfig, TrainerRunConfig
from app.trainer.collectives import RankGroup
from app.trainer.rollout_batch import REWARD_EXTRA, RolloutGroup, decode_responses, repeat_per_sample


class RewardScorer(Protocol):
    """What the loop needs from the reward step (`Scorer`)."""

    def score(
        self,
        responses: list[str],
        data_sources: list[str],
        ground_truths: list[Any],
        extra_infos: list[dict],
        messages: list[list[dict]],
    ) -> tuple[list[float], dict[str, float], dict[str, list[Any]]]: ...


class Scorer:
    def __init__(self, cfg: TrainerRunConfig, tokenizer: Any, device: Any = "cpu") -> None:
        """`device`: where a reward model runs, in that device's compute dtype (the rank's own device)."""
        from app.rewards import RewardFnSpec, RewardManager

        rm, custom = cfg.reward_model, cfg.custom_reward_function
        self.model = None
        if rm.enable:
            from app.rewards import RewardModelScorer

            self.model = RewardModelScorer(
                rm.model.path,
                policy_tokenizer=_input_tokenizer(rm.model, tokenizer),
                max_length=rm.max_length,
                batch_size=rm.micro_batch_size_per_gpu,
                trust_remote_code=rm.model.trust_remote_code,
                device=device,
            )
            self.rules = None
        else:
            spec = RewardFnSpec(path=custom.path, name=custom.name, reward_kwargs=dict(custom.reward_kwargs))
            self.rules = RewardManager(
                spec,
                num_workers=rm.num_workers,
                timeout_s=rm.timeout_s,
                on_error=rm.on_error,
                max_failed_fraction=rm.max_failed_fraction,
                batched=rm.reward_manager == "batch",
            )

    def score(
        self,
        responses: Sequence[str],
        data_sources: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict],
        messages: Sequence[list[dict]],
    ) -> tuple[list[float], dict[str, float], dict[str, list[Any]]]:
        """One score per response, `reward/*` metrics of this batch, and the extra fields of reward functions that
        return dicts (e.g. `acc`), one value per response (None where a response's result lacked the field)."""
        if self.model is not None:
            scores = self.model.score(messages, responses)
            n = max(len(scores), 1)
            return scores, {"reward/model/mean": sum(scores) / n}, {}
        result = self.rules.score(responses, data_sources, ground_truths, extra_infos)
        return result.scores, result.metrics, result.extra

    def close(self) -> None:
        if self.rules is not None:
            self.rules.close()


def build_scorer(cfg: TrainerRunConfig, tokenizer: Any, device: Any = "cpu") -> Scorer:
    return Scorer(cfg, tokenizer, device)


def score_group(
    scorer: RewardScorer,
    tokenizer: Any,
    group: RolloutGroup,
    overlong: OverlongBufferConfig,
    response_length_limit: int,
    ranks: RankGroup,
) -> dict[str, float]:
    """Score `group`'s responses into `token_level_scores` (the score on each response's last token), with the
    overlong penalty added when `reward_model.overlong_buffer.enable`; returns the `reward/*` metrics, averaged over
    the ranks (collective). Keeps each sample's task score (and `acc`, `overlong_penalty`, and each field the reward
    returned beside its score as `reward_extra/<field>`) in `group.extras`."""
    scores, metrics, extra = scorer.score(
        decode_responses(tokenizer, group.batch),
        group.data_source,
        group.ground_truth,
        group.extra_info,
        group.messages,
    )
    mask = group.batch["response_mask"]
    group.extras["task_score"] = list(scores)
    if "acc" in extra:
        group.extras["acc"] = extra["acc"]
    for key, values in extra.items():  # every field the reward returned beside its score, for the rollout dumps
        group.extras[REWARD_EXTRA + key] = values
    rewards = torch.tensor(scores, dtype=torch.float32)
    if overlong.enable:
        penalty = overlong_penalty(mask.sum(dim=1), response_length_limit, overlong.len, overlong.penalty_factor)
        rewards = rewards + penalty
        group.extras["overlong_penalty"] = penalty.tolist()
        metrics |= {
            "reward/overlong_penalty/mean": float(penalty.mean()),
            "reward/overlong_ratio": float((penalty < 0).float().mean()),
        }
    # on the last response token: the last real one, which a multi-turn row's mask alone would not find
    ends = group.batch["attention_mask"][:, -mask.shape[1] :].sum(dim=1)
    group.batch["token_level_scores"] = scores_to_token_rewards(rewards, ends, mask.shape[1])
    return ranks.reduce(metrics)


def greedy_baselines(rollout: Any, scorer: Any, tokenizer: Any, prompts: Any, n: int, version: int):
    """ReMax: the reward of each prompt's greedy response (policy `version`), repeated for its `n` samples."""
    samples = rollout.generate(prompts.raw_prompt_ids, validation=True, expect_version=version)
    texts = tokenizer.batch_decode([s.response_token_ids for s in samples], skip_special_tokens=True)
    scores, _, _ = scorer.score(
        texts, prompts.data_source, prompts.ground_truth, prompts.extra_info, prompts.raw_prompt
    )
    return torch.tensor(repeat_per_sample(scores, n), dtype=torch.float32)


def _input_tokenizer(model_cfg: Any, policy_tokenizer: Any) -> Any:
    """verl's `reward_model.model.input_tokenizer`: the tokenizer that made the policy's ids (None: the policy's)."""
    if model_cfg.input_tokenizer is None:
        return policy_tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_cfg.input_tokenizer, trust_remote_code=model_cfg.trust_remote_code)
