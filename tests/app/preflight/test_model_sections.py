"""The model sections the pre-flight checks walk: the policy always, the critic only for an estimator that needs one,
the reward model only when enabled with a path; the external_lib import walks all three."""

from app.config.schema import TrainerRunConfig
from app.preflight.model_sections import built_model_sections, model_sections


def _keys(sections):
    return [key for key, _ in sections]


def test_a_grpo_run_builds_the_policy_alone():
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "grpo"
    cfg.critic.model.path = "critic-folder"  # set, but GRPO has no critic
    cfg.reward_model.model.path = "rm-folder"  # set, but reward_model.enable is off
    assert _keys(built_model_sections(cfg)) == ["actor_rollout_ref.model"]
    assert _keys(model_sections(cfg)) == ["actor_rollout_ref.model", "critic.model", "reward_model.model"]


def test_gae_adds_the_critic_and_an_enabled_reward_model_follows():
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "gae"
    cfg.critic.model.path = "critic-folder"
    cfg.reward_model.enable = True
    assert _keys(built_model_sections(cfg)) == ["actor_rollout_ref.model", "critic.model"]  # no reward model path
    cfg.reward_model.model.path = "rm-folder"
    built = dict(built_model_sections(cfg))
    assert list(built) == ["actor_rollout_ref.model", "critic.model", "reward_model.model"]
    assert built["critic.model"].path == "critic-folder" and built["reward_model.model"].path == "rm-folder"
