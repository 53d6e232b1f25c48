"""`app.trainer.learner.Learner`: which log-probs a step computes, and the advantages it writes (one rank)."""

from __future__ import annotations

import math

import torch

from algos.kl_controller import make_kl_controller
from app.batch import TensorBatch
from app.config.schema import TrainerRunConfig
from app.trainer.collectives import RankGroup
from app.trainer.learner import Learner
from app.trainer.rollout_batch import RolloutGroup, build_rollout_batch
from app.trainer.step_metrics import PhaseTimer


class OneRank:
    dp_rank, dp_world_size = 0, 1

    def all_reduce(self, tensor, op):
        return tensor


class RecordingActor:
    def __init__(self):
        self.calls = []

    def is_on_policy(self, rows):
        return False

    def compute_log_prob(self, batch):
        self.calls.append("log_prob")
        return {"old_log_probs": torch.zeros_like(batch["rollout_log_probs"])}

    def update_policy(self, batch, replay=None):
        self.calls.append("update")
        self.trained, self.replayed = batch, replay
        return {"actor/pg_loss": 0.5}


def group_of(scores: list[float]) -> RolloutGroup:
    """Two prompts, two samples each, one response token per sample carrying the score."""
    mask = torch.ones(4, 1, dtype=torch.long)
    batch = TensorBatch(
        {
            "response_mask": mask,
            "rollout_log_probs": torch.full((4, 1), -0.5),
            "token_level_scores": torch.tensor(scores).unsqueeze(1),
        }
    )
    return RolloutGroup(
        batch=batch,
        uid=["a", "a", "b", "b"],
        dataset_index=[0, 0, 1, 1],
        data_source=["d"] * 4,
        ground_truth=[None] * 4,
        extra_info=[{}] * 4,
        messages=[[]] * 4,
        finish_reason=["stop"] * 4,
        policy_version=0,
    )


def learner(cfg: TrainerRunConfig, actor) -> Learner:
    kl = cfg.algorithm.kl_ctrl
    return Learner(
        cfg,
        actor=actor,
        reference=None,
        critic=None,
        ranks=RankGroup(OneRank()),
        kl_ctrl=make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon),
    )


def test_grpo_advantages_are_the_scores_normalised_within_each_prompts_group():
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "grpo"
    group = group_of([1.0, 0.0, 0.0, 0.0])
    assert learner(cfg, RecordingActor()).advantages(group) == {}  # no KL in the reward: no metrics
    # group a: scores (1, 0), mean 0.5, sample std 0.7071 -> (+0.7071, -0.7071); group b: equal scores -> 0
    expected = torch.tensor([[0.70710677], [-0.70710677], [0.0], [0.0]])
    assert torch.allclose(group.batch["advantages"], expected, atol=1e-5)
    assert torch.equal(group.batch["token_level_rewards"], group.batch["token_level_scores"])


class AnotherRankWith:
    """Sums over this rank and one more that holds `rows` samples, `scored` of them with a nonzero score."""

    dp_rank, dp_world_size = 0, 2

    def __init__(self, rows: int, scored: int):
        self.others = torch.tensor([rows, scored], dtype=torch.float64)

    def all_reduce(self, tensor, op):
        assert op == "sum" and tensor.shape == (2,)  # gpg's counts: responses, scored
        return tensor + self.others


def test_gpg_scales_by_the_whole_batchs_share_of_scored_responses():
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "gpg"
    group = group_of([1.0, 0.0, 0.0, 0.0])
    steps = learner(cfg, RecordingActor())
    steps.ranks = RankGroup(AnotherRankWith(rows=4, scored=4))
    steps.advantages(group)
    # 8 responses over both ranks, 5 scored: alpha = 8 / 5; group a: (1, 0) - 0.5 -> +-0.5 * 1.6; group b alike -> 0
    # (this rank alone would give alpha 4 / 1 and +-2)
    expected = torch.tensor([[0.8], [-0.8], [0.0], [0.0]])
    assert torch.allclose(group.batch["advantages"], expected, atol=1e-6)


class ConcentratedActor(RecordingActor):
    """Samples tokens of probability 1/2 from distributions whose squared probabilities sum to 1/2."""

    def __init__(self, on_policy: bool):
        super().__init__()
        self.on_policy = on_policy

    def is_on_policy(self, rows):
        return self.on_policy

    def compute_log_prob(self, batch):
        self.calls.append("log_prob")
        shape = batch["rollout_log_probs"].shape
        return {"old_log_probs": torch.full(shape, math.log(0.5)), "sum_pi_squared": torch.full(shape, 0.5)}


def test_the_optimal_token_baseline_gets_the_old_policys_sum_of_squared_probabilities():
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "optimal_token_baseline"
    cfg.actor_rollout_ref.actor.calculate_sum_pi_squared = True
    actor, group = ConcentratedActor(on_policy=True), group_of([1.0, 0.0, 0.0, 0.0])
    steps = learner(cfg, actor)
    steps.log_probs(group, PhaseTimer())
    assert actor.calls == ["log_prob"]  # on-policy, yet the pass runs: it is where sum_pi_squared comes from
    metrics = steps.advantages(group)
    # one token each, every W = 1 - 2 x 0.5 + 0.5 = 0.5: group a's baseline is the plain mean 0.5
    expected = torch.tensor([[0.5], [-0.5], [0.0], [0.0]])
    assert torch.allclose(group.batch["advantages"], expected) and metrics == {"actor/sum_pi_squared": 0.5}
    # with rollout importance weights each token's W is scaled by the weight squared: a sampler that gave row 1 half
    # the old policy's probability weighs it 2, so W = (0.5, 2.0) and group a's baseline is (1 x 0.5) / 2.5 = 0.2
    cfg.algorithm.rollout_correction.rollout_is = "token"
    group = group_of([1.0, 0.0, 0.0, 0.0])
    group.batch["rollout_log_probs"] = torch.tensor([[0.5], [0.25], [0.5], [0.5]]).log()
    steps = learner(cfg, ConcentratedActor(on_policy=False))
    steps.log_probs(group, PhaseTimer())
    steps.advantages(group)
    assert torch.allclose(group.batch["advantages"][:2], torch.tensor([[0.8], [-0.2]]))


def test_bypass_mode_takes_the_samplers_log_probs_and_a_warmup_step_leaves_the_actor_alone():
    cfg = TrainerRunConfig()
    cfg.algorithm.rollout_correction.bypass_mode = True
    cfg.trainer.critic_warmup = 1
    actor, group, timer = RecordingActor(), group_of([1.0, 0.0, 0.0, 0.0]), PhaseTimer()
    steps = learner(cfg, actor)
    steps.log_probs(group, timer)
    assert torch.equal(group.batch["old_log_probs"], group.batch["rollout_log_probs"]) and actor.calls == []
    assert steps.update(group, step=1, timer=timer) == {} and actor.calls == []  # step 1 is within the warm-up
    assert steps.update(group, step=2, timer=timer) == {"actor/pg_loss": 0.5} and actor.calls == ["update"]
    assert set(timer.seconds) == {"update_actor"}


def scored_group(task_scores: list[float]) -> RolloutGroup:
    """`group_of`'s two prompts of two samples, with token ids (response i is token 20 + i) and task scores."""
    group = group_of(task_scores)
    tokens = build_rollout_batch([[1, 2], [1, 2], [3], [3]], [[20], [21], [22], [23]], [[0.0]] * 4, pad_token_id=0)
    group.batch.update(tokens)
    group.extras["task_score"] = list(task_scores)
    return group


def test_self_imitation_replays_the_earlier_good_answers_not_the_current_ones():
    cfg = TrainerRunConfig()
    imitation = cfg.actor_rollout_ref.actor.self_imitation
    imitation.coef, imitation.rows_per_step = 0.5, 2
    actor, timer = RecordingActor(), PhaseTimer()
    steps = learner(cfg, actor)
    metrics = steps.update(scored_group([1.0, 0.0, 0.0, 1.0]), step=1, timer=timer)
    assert actor.replayed is None  # nothing earlier to replay; this step's good answers train as samples
    assert metrics["actor/self_imitation_added"] == 2 and metrics["actor/self_imitation_rows"] == 0
    metrics = steps.update(scored_group([0.0, 1.0, 0.0, 0.0]), step=2, timer=timer)
    replayed = {
        tuple(r[m.bool()].tolist()) for r, m in zip(actor.replayed["responses"], actor.replayed["response_mask"])
    }
    assert replayed == {(20,), (23,)} and actor.replayed["replayed"].tolist() == [1.0, 1.0]  # step 1's, not 21
    assert metrics["actor/self_imitation_rows"] == 2 and metrics["actor/self_imitation_kept"] == 3


def test_without_self_imitation_the_actor_gets_no_replay():
    actor = RecordingActor()
    metrics = learner(TrainerRunConfig(), actor).update(scored_group([1.0] * 4), step=1, timer=PhaseTimer())
    assert actor.replayed is None and not any("self_imitation" in k for k in metrics)


def test_pf_ppo_trains_on_the_batch_drawn_again_by_reward_and_the_buffer_keeps_the_steps_own_samples():
    cfg = TrainerRunConfig()
    cfg.algorithm.use_pf_ppo = True
    cfg.algorithm.pf_ppo.reweight_method = "max_min"  # weights 1 at the highest and lowest score, else 0 (+1e-8)
    imitation = cfg.actor_rollout_ref.actor.self_imitation
    imitation.coef, imitation.rows_per_step = 0.5, 2
    actor, group = RecordingActor(), scored_group([3.0, 1.0, 2.0, 2.0])
    metrics = learner(cfg, actor).update(group, step=1, timer=PhaseTimer())
    drawn = actor.trained["responses"][:, 0].tolist()
    assert len(drawn) == 4 and set(drawn) <= {20, 21}  # rows 0 (score 3, highest) and 1 (score 1, lowest) only
    assert metrics["training/pf_ppo_distinct_rows"] == len(set(drawn)) / 4
    # the replay buffer takes the step's own samples, not the draw: both score-2 answers were kept too (min_score 1)
    assert metrics["actor/self_imitation_added"] == 4
    # the same step, rank and seed draw the same rows (a resumed run repeats its steps)
    again = RecordingActor()
    learner(cfg, again).update(scored_group([3.0, 1.0, 2.0, 2.0]), step=1, timer=PhaseTimer())
    assert again.trained["responses"][:, 0].tolist() == drawn


def test_without_pf_ppo_the_update_trains_on_the_batch_itself():
    actor, group = RecordingActor(), scored_group([1.0, 0.0, 0.0, 1.0])
    metrics = learner(TrainerRunConfig(), actor).update(group, step=1, timer=PhaseTimer())
    assert actor.trained is group.batch and "training/pf_ppo_distinct_rows" not in metrics


def test_truncated_responses_leave_the_actors_loss_and_the_flag_follows_pf_ppos_draw():
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.actor.mask_truncated_completions = True
    group = scored_group([3.0, 1.0, 2.0, 2.0])
    group.finish_reason = ["stop", "length", "stop", "length"]  # rows 1 and 3 were cut at the token limit
    actor = RecordingActor()
    learner(cfg, actor).update(group, step=1, timer=PhaseTimer())
    assert actor.trained["response_mask"].sum(-1).tolist() == [1, 0, 1, 0]
    assert group.batch["response_mask"].sum(-1).tolist() == [1, 1, 1, 1]  # the step's own batch keeps them
    # PF-PPO draws rows 0 and 1 only (max_min: the highest and lowest score); row 1's flag goes with each copy
    cfg.algorithm.use_pf_ppo, cfg.algorithm.pf_ppo.reweight_method = True, "max_min"
    actor = RecordingActor()
    learner(cfg, actor).update(group, step=1, timer=PhaseTimer())
    for response, kept in zip(actor.trained["responses"][:, 0].tolist(), actor.trained["response_mask"][:, 0].tolist()):
        assert kept == (response == 20), (response, kept)
    # without the flag the cut responses train as the others
    actor = RecordingActor()
    learner(TrainerRunConfig(), actor).update(group, step=1, timer=PhaseTimer())
    assert actor.trained["response_mask"].sum(-1).tolist() == [1, 1, 1, 1]
