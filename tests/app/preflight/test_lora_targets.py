"""LoRA's target_modules name modules of the model, checked on a meta-device copy before Ray starts: a misspelt name
in a list (which peft skips without a word), a list or regex that matches nothing, and a module peft cannot wrap are
each named with their key."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.lora_targets import check_lora_targets

LEAVES = "down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj"  # a Llama's linear layers


def _cfg(model_dir, target_modules, exclude_modules=None, lora_rank=4):
    cfg = TrainerRunConfig()
    cfg.algorithm.adv_estimator = "grpo"
    model = cfg.actor_rollout_ref.model
    model.path, model.lora_rank = model_dir, lora_rank
    model.target_modules, model.exclude_modules = target_modules, exclude_modules
    return cfg


@pytest.mark.parametrize(
    "targets, exclude",
    [("all-linear", None), (["q_proj", "v_proj"], None), (r".*self_attn\.(q|v)_proj", r".*layers\.1\..*")],
)
def test_names_peft_matches_pass(model_dir, targets, exclude):
    check_lora_targets(_cfg(model_dir, targets, exclude))


def test_a_list_name_that_matches_nothing_is_refused_even_beside_a_good_one(model_dir):
    # peft itself adapts q_proj and skips v_porj silently
    with pytest.raises(
        PreflightError,
        match=rf"^actor_rollout_ref\.model\.target_modules: 'v_porj' names no module of LlamaForCausalLM, so peft "
        rf"would skip it without a word; did you mean v_proj\? its linear layers end in {LEAVES}$",
    ):
        check_lora_targets(_cfg(model_dir, ["q_proj", "v_porj"]))
    with pytest.raises(PreflightError, match=r"'q' names no module .*; its linear layers end in"):
        check_lora_targets(_cfg(model_dir, ["q", "v"]))


def test_a_regex_that_matches_no_whole_name_is_refused(model_dir):
    with pytest.raises(
        PreflightError,
        match=r"^actor_rollout_ref\.model\.target_modules='q_proj': the regex matches no module name of "
        r"LlamaForCausalLM \(a whole name, e\.g\. model\.layers\.0\.self_attn\.q_proj\)",
    ):
        check_lora_targets(_cfg(model_dir, "q_proj"))  # a string is a regex over whole names, as in peft
    check_lora_targets(_cfg(model_dir, "all-linear", ".*visual.*"))  # an exclusion that matches nothing: harmless


def test_a_module_peft_cannot_wrap_is_refused_with_peft_s_reason(model_dir):
    with pytest.raises(PreflightError, match=r"^actor_rollout_ref\.model\.target_modules=\['rotary_emb'\]: .*"):
        check_lora_targets(_cfg(model_dir, ["rotary_emb"]))


def test_the_critic_s_adapters_are_checked_when_the_estimator_has_a_critic(model_dir):
    cfg = _cfg(model_dir, "all-linear", lora_rank=0)  # a full fine-tune of the actor: nothing to check there
    cfg.critic.model.path, cfg.critic.model.lora_rank, cfg.critic.model.target_modules = model_dir, 4, ["q_prj"]
    check_lora_targets(cfg)  # GRPO builds no critic
    cfg.algorithm.adv_estimator = "gae"
    with pytest.raises(PreflightError, match=r"^critic\.model\.target_modules: 'q_prj' .*did you mean q_proj\?"):
        check_lora_targets(cfg)
