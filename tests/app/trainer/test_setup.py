"""What build_trainer hands the trackers: the run's config without secrets."""
import json

from app.config.schema import TrainerRunConfig
from app.trainer.setup import _loggable


def test_the_logged_config_hides_the_api_key_and_keeps_the_rest():
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.rollout.http_api_key = "sk-secret-123"
    tree = _loggable(cfg)
    assert "sk-secret-123" not in json.dumps(tree)
    assert tree["actor_rollout_ref"]["rollout"]["http_api_key"] == "<set>"
    assert tree["trainer"]["project_name"] == cfg.trainer.project_name
    assert cfg.actor_rollout_ref.rollout.http_api_key == "sk-secret-123"  # the run itself still has it
    assert _loggable(TrainerRunConfig())["actor_rollout_ref"]["rollout"]["http_api_key"] is None
