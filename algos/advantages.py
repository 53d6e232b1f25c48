"""Advantage estimators, selected by ``algorithm.adv_estimator`` (names and traits: ``algos.catalog``).

Every estimator is an ``algos.protocols.AdvantageFn``: it takes ``token_level_rewards`` and ``response_mask`` of
shape ``(batch, response_len)`` plus whatever else it needs, and returns ``(advantages, returns)``, both
``(batch, response_len)`` and exactly 0 outside ``response_mask``. Values at masked positions (padding, or
tool/observation tokens inside a multi-turn response) are never read: a masked token neither contributes reward nor
advances a recursion.

Outcome estimators (grpo, rloo, opo, reinforce_plus_plus_baseline) reduce each response to one score, the sum of its
kept token rewards, and compare responses of the same prompt. Responses are grouped by ``index``: one hashable per
row (the prompt uid), e.g. a list of strings or a numpy object array.

Names and defaults follow verl's ``algorithm.*`` keys: ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``.
All functions run without autograd; advantages are targets, not part of the graph.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import torch

from algos.catalog import ADV_ESTIMATORS
from algos.masked import BatchSum, masked_fill_zero, masked_moments, masked_whiten
from algos.registry import call_with_supported_kwargs


def _check_2d(name: str, tensor: torch.Tensor, like: torch.Tensor | None = None) -> None:
    if tensor.dim() != 2:
        raise ValueError(f"{name} must be (batch, response_len), got shape {tuple(tensor.shape)}")
    if like is not None and tensor.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but response_mask has {tuple(like.shape)}")


def _group_ids(index: Sequence[Hashable], batch: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map each row's prompt uid to a dense group id. Returns ``(ids (batch,) int64, number_of_groups)``."""
    if isinstance(index, torch.Tensor):
        # 0-d tensors hash by identity, so each row would become its own group; compare their values instead.
        index = index.tolist()
    if len(index) != batch:
        raise ValueError(f"index has {len(index)} entries but the batch has {batch} rows; give one prompt uid per row")
    dense: dict[Hashable, int] = {}
    ids = [dense.setdefault(uid, len(dense)) for uid in index]
    return torch.tensor(ids, dtype=torch.long, device=device), len(dense)


def _sequence_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One outcome score per response: the sum of its kept token rewards, (batch,)."""
    return masked_fill_zero(token_level_rewards, response_mask).sum(dim=-1)


class _GroupStats:
    """Per-group count, mean and unbiased std of per-row scores.

    Scores are first shifted by the score of each group's first member. The shift cancels in every statistic but
    makes a group of identical scores give deviations that are exactly 0 (a plain mean of e.g. three 0.1s is off by
    an ulp, which a 1e-6 std epsilon would blow up into a visible advantage).
    """

    def __init__(self, scores: torch.Tensor, index: Sequence[Hashable]) -> None:
        batch = scores.shape[0]
        self.ids, n_groups = _group_ids(index, batch, scores.device)
        first_row = torch.full((n_groups,), batch, dtype=torch.long, device=scores.device)
        first_row = first_row.scatter_reduce(0, self.ids, torch.arange(batch, device=scores.device), reduce="amin")
        # Score minus the score of the group's first member, (batch,).
        self.shifted = shifted = scores - scores[first_row][self.ids]
        zeros = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
        self.count = torch.bincount(self.ids, minlength=n_groups).to(scores.dtype)
        shifted_mean = zeros.index_add(0, self.ids, shifted) / self.count
        # Deviation of each row from its group mean, (batch,).
        self.deviation = shifted - shifted_mean[self.ids]
        sq = zeros.index_add(0, self.ids, self.deviation**2)
        self.std = torch.sqrt(sq / (self.count - 1).clamp(min=1))
        self.row_count = self.count[self.ids]
        self.singleton = self.row_count == 1


def _broadcast(per_row: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Put one value per row on every kept token of that row."""
    return masked_fill_zero(per_row.unsqueeze(-1).expand_as(response_mask).to(per_row.dtype), response_mask)


@torch.no_grad()
def gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
    batch_sum: BatchSum | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (PPO with a critic).

    Backwards over tokens: ``delta_t = r_t + gamma * V_next - V_t``, ``A_t = delta_t + gamma * lam * A_next``, where
    "next" is the next *kept* token: masked tokens leave ``V_next`` and ``A_next`` untouched. After the last kept token
    ``V_next = A_next = 0``. ``returns = A + V`` (the critic's target) uses the raw advantages; the returned advantages
    are whitened over all kept tokens of the batch, as verl does (``batch_sum``: over every rank's part of it, see
    ``algos.masked.masked_whiten``).

    Shapes: all inputs ``(batch, response_len)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    _check_2d("values", values, response_mask)
    keep = response_mask.bool()
    rewards = masked_fill_zero(token_level_rewards, keep)
    vals = masked_fill_zero(values, keep).to(rewards.dtype)
    batch, length = rewards.shape
    next_value = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
    next_adv = torch.zeros_like(next_value)
    raw_adv = torch.zeros_like(rewards)
    for t in range(length - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        adv_t = delta + gamma * lam * next_adv
        kept = keep[:, t]
        next_adv = torch.where(kept, adv_t, next_adv)
        next_value = torch.where(kept, vals[:, t], next_value)
        raw_adv[:, t] = next_adv
    raw_adv = masked_fill_zero(raw_adv, keep)
    returns = masked_fill_zero(raw_adv + vals, keep)
    return masked_whiten(raw_adv, keep, batch_sum=batch_sum), returns


@torch.no_grad()
def grpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage: ``(score - group_mean) / (group_std + epsilon)`` on every kept token.

    ``norm_adv_by_std_in_grpo=False`` drops the std division (Dr. GRPO). The std is the unbiased sample std. A prompt
    with a single response uses mean 0 and std 1, so its advantage is its own score (as in verl).
    Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    stats = _GroupStats(scores, index)
    centred = torch.where(stats.singleton, scores, stats.deviation)
    if norm_adv_by_std_in_grpo:
        std = torch.where(stats.singleton, torch.ones_like(scores), stats.std[stats.ids])
        centred = centred / (std + epsilon)
    adv = _broadcast(centred, response_mask)
    return adv, adv


@torch.no_grad()
def grpo_batch_std(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    epsilon: float = 1e-6,
    batch_sum: BatchSum | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's group-mean baseline scaled by the whole batch's std: ``(score - group_mean) / (batch_std + epsilon)`` on
    every kept token (TRL's ``scale_rewards="batch"``; group mean and batch std, as LitePPO, Liu et al., 2025,
    "Tricks or Traps? A Deep Dive into RL for LLM Reasoning").

    ``batch_std``: the unbiased std of every response's score in the batch, over every rank's part with ``batch_sum``
    (``algos.masked.masked_moments``). A group that differs little keeps a small advantage, where the group std would
    blow it up. A single-response group uses mean 0 (as ``grpo``). Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    stats = _GroupStats(scores, index)
    centred = torch.where(stats.singleton, scores, stats.deviation)
    _, var = masked_moments(scores, torch.ones_like(scores, dtype=torch.bool), batch_sum)
    adv = _broadcast(centred / (var.sqrt().to(scores.dtype) + epsilon), response_mask)
    return adv, adv


@torch.no_grad()
def rloo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out: ``score_i - mean of the other responses' scores`` in the group.

    Equal to ``n / (n - 1) * (score_i - group_mean)``. A single-response group has no baseline: advantage = score.
    Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    stats = _GroupStats(scores, index)
    n = stats.row_count
    loo = stats.deviation * n / (n - 1).clamp(min=1)
    adv = _broadcast(torch.where(stats.singleton, scores, loo), response_mask)
    return adv, adv


@torch.no_grad()
def opo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
) -> tuple[torch.Tensor, torch.Tensor]:
    """On-Policy Optimal baseline: ``score_i - sum_j(len_j * score_j) / sum_j(len_j)`` over the group.

    ``len`` is the number of kept response tokens. A single-response group uses baseline 0.
    Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    stats = _GroupStats(scores, index)
    lengths = response_mask.bool().sum(dim=-1).to(scores.dtype)
    n_groups = stats.count.shape[0]
    zeros = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device)
    # Baseline in shifted coordinates (see _GroupStats), so identical scores give exactly 0.
    weighted = zeros.index_add(0, stats.ids, lengths * stats.shifted)
    total_len = zeros.index_add(0, stats.ids, lengths)
    centred = stats.shifted - (weighted / total_len.clamp(min=1))[stats.ids]
    adv = _broadcast(torch.where(stats.singleton, scores, centred), response_mask)
    return adv, adv


def _discounted_returns(rewards: torch.Tensor, keep: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_next`` over kept tokens; masked tokens pass the running return through unchanged."""
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    returns = torch.zeros_like(rewards)
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(keep[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return masked_fill_zero(returns, keep)


@torch.no_grad()
def reinforce_plus_plus(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    batch_sum: BatchSum | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: gamma-discounted reward-to-go per token, whitened over all kept tokens of the batch (``batch_sum``:
    over every rank's part of it, see ``algos.masked.masked_whiten``).

    Returns ``(whitened returns, raw returns)``. Unlike verl, which resets the running return at every masked token, a
    masked span inside a response is skipped; for ordinary right padding the two agree.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    keep = response_mask.bool()
    returns = _discounted_returns(masked_fill_zero(token_level_rewards, keep), keep, gamma)
    return masked_whiten(returns, keep, batch_sum=batch_sum), returns


@torch.no_grad()
def reinforce_plus_plus_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    batch_sum: BatchSum | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline: ``score - group_mean`` on every kept token, then whitened over all kept
    tokens of the batch (``batch_sum``: over every rank's part of it; a group's rows are on one rank). A
    single-response group uses mean 0. Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    stats = _GroupStats(scores, index)
    centred = torch.where(stats.singleton, scores, stats.deviation)
    adv = masked_whiten(_broadcast(centred, response_mask), response_mask, batch_sum=batch_sum)
    return adv, adv


@torch.no_grad()
def gpg(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    batch_sum: BatchSum | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group Policy Gradient (Chu et al., 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning"): ``alpha * (score - group_mean)`` on every kept token, no std division.

    ``alpha = responses / max(scored, 1)``: the batch's responses over those with a nonzero score, so a batch where
    few responses score keeps the gradient's size (the paper's correction for groups that teach nothing). Counted
    over every rank's part of the batch with ``batch_sum`` (``algos.masked.BatchSum``); None: this batch's own. A
    single-response group uses mean 0 (as verl). Returns ``(advantages, advantages)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    scores = _sequence_scores(token_level_rewards, response_mask)
    counts = torch.tensor([scores.shape[0], int(torch.count_nonzero(scores))], dtype=torch.float64)
    responses, scored = (batch_sum(counts) if batch_sum is not None else counts).tolist()
    stats = _GroupStats(scores, index)
    centred = torch.where(stats.singleton, scores, stats.deviation)
    adv = _broadcast(centred * (responses / max(scored, 1)), response_mask)
    return adv, adv


@torch.no_grad()
def optimal_token_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Hashable],
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    epsilon: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline (verl's ``optimal_token_baseline``): ``A_t = G_t - B_t`` with the reward-to-go ``G_t``
    and one baseline per position and group, ``B_t = sum_i G_t W_t / sum_i W_t`` over the group's responses that
    reach position t. ``W_t = sum_{j<=t} (1 - 2 pi_j + sum_v pi_v^2)``: each token's squared score-function norm
    (``pi_j`` the sampled token's probability, ``exp(old_log_probs)``), accumulated along the response, so the
    responses whose gradients are noisier weigh more in the baseline that minimises the gradient's variance.

    ``sum_pi_squared``: ``(batch, response_len)`` from the old-policy pass (``actor.calculate_sum_pi_squared``).
    ``rollout_is_weights``: truncated importance weights; each token's term is scaled by their square (verl's).
    A single-response group has no baseline; in a group whose longest response is the only one that long, that
    response's baseline past the second-longest length is 0 (nothing else to compare there; verl's zero tail).
    Returns ``(advantages, returns)``, both 0 outside ``response_mask``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    _check_2d("old_log_probs", old_log_probs, response_mask)
    _check_2d("sum_pi_squared", sum_pi_squared, response_mask)
    keep = response_mask.bool()
    kept = keep.to(torch.float32)
    returns = _discounted_returns(masked_fill_zero(token_level_rewards.float(), keep), keep, 1.0)
    norms = 1 - 2 * old_log_probs.float().exp() + sum_pi_squared.float()
    if rollout_is_weights is not None:
        _check_2d("rollout_is_weights", rollout_is_weights, response_mask)
        norms = norms * rollout_is_weights.float() ** 2
    weights = masked_fill_zero(norms, keep).cumsum(-1) * kept  # W_t, 0 outside the response
    ids, n_groups = _group_ids(index, returns.shape[0], returns.device)
    zeros = torch.zeros(n_groups, returns.shape[1], dtype=returns.dtype, device=returns.device)
    numerator = zeros.index_add(0, ids, returns * weights)
    denominator = zeros.index_add(0, ids, weights) + epsilon
    baselines = (numerator / denominator)[ids]
    lengths = keep.sum(-1)
    for group in range(n_groups):
        rows = (ids == group).nonzero(as_tuple=True)[0]
        if len(rows) == 1:
            baselines[rows] = 0.0
            continue
        longest, second = torch.topk(lengths[rows], 2).values.tolist()
        if longest > second:  # the one response that long: nothing to compare its tail with
            baselines[rows[lengths[rows].argmax()], int(second) :] = 0.0
    advantages = (returns - baselines) * kept
    return advantages.to(token_level_rewards.dtype), returns.to(token_level_rewards.dtype)


@torch.no_grad()
def remax(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: undiscounted reward-to-go minus a per-response baseline (the reward of the greedy response).

    ``reward_baselines``: ``(batch,)``. Returns ``(reward_to_go - baseline, reward_to_go)``.
    """
    _check_2d("response_mask", response_mask)
    _check_2d("token_level_rewards", token_level_rewards, response_mask)
    if reward_baselines.shape != response_mask.shape[:1]:
        raise ValueError(
            f"reward_baselines must be (batch,)=({response_mask.shape[0]},), got {tuple(reward_baselines.shape)}"
        )
    keep = response_mask.bool()
    returns = _discounted_returns(masked_fill_zero(token_level_rewards, keep), keep, 1.0)
    adv = masked_fill_zero(returns - reward_baselines.to(returns.dtype).unsqueeze(-1), keep)
    return adv, returns


def compute_advantages(name: str, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator named ``name`` (or ``"module:function"``) with the inputs it accepts.

    Pass everything you have (``token_level_rewards``, ``response_mask``, ``values``, ``index``, ``gamma``, ``lam``,
    ``norm_adv_by_std_in_grpo``, ``reward_baselines``, ...); each estimator takes only what it declares.
    """
    return call_with_supported_kwargs(ADV_ESTIMATORS.get(name), **inputs)
