"""docs/config.md, the configuration reference, generated from app/config/schema.py: every key with its type, its
default, its meaning (the schema's comment beside or above the field) and whether verl has it.

`python -m app.config.reference` rewrites the page; tests/app/config/test_reference.py fails when it and the schema
disagree, so a key added to the schema without a regenerated page is caught.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import sys
import tokenize
import types
import typing
from pathlib import Path
from typing import Any, Iterator, Literal, NamedTuple, Union

from app.config import schema
from app.config.schema import TrainerRunConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"

# Keys (or whole sections) that verl's trainer config does not have: this framework's own settings. A schema comment
# that says "ours, not verl's" marks a key as well.
OURS = frozenset(
    {
        "data.ground_truth_key",
        "data.default_data_source",
        "data.system_prompt",
        "data.sampler.options",
        "actor_rollout_ref.model.share_prompt_prefix",
        "critic.model.share_prompt_prefix",
        "actor_rollout_ref.actor.logits_chunk_size",
        "actor_rollout_ref.actor.self_imitation",
        "actor_rollout_ref.actor.deepspeed_config",
        "actor_rollout_ref.actor.mask_truncated_completions",  # TRL's GRPOConfig name
        "actor_rollout_ref.ref.sync_ref_model",  # TRL's GRPOConfig names; verl's main config has none of the three
        "actor_rollout_ref.ref.ref_model_sync_steps",
        "actor_rollout_ref.ref.ref_model_mixup_alpha",
        "critic.deepspeed_config",
        "actor_rollout_ref.rollout.lora_sync",
        "actor_rollout_ref.rollout.lora_fold_dtype",
        "actor_rollout_ref.rollout.replicas",
        "actor_rollout_ref.rollout.cpu_kv_cache_gib",
        "actor_rollout_ref.rollout.cpu_block_size",
        "actor_rollout_ref.rollout.cpus_per_replica",
        "actor_rollout_ref.rollout.replica_resources",
        "actor_rollout_ref.rollout.omp_threads",
        "actor_rollout_ref.rollout.http_host",
        "actor_rollout_ref.rollout.http_api_key",
        "actor_rollout_ref.rollout.http_port",
        "reward_model.num_workers",
        "reward_model.timeout_s",
        "reward_model.on_error",
        "reward_model.max_failed_fraction",
        "async_training",
        "trainer.num_workers",
        "trainer.cpus_per_worker",
        "trainer.worker_resources",
        "trainer.placement",
        "trainer.max_bad_steps",
        "trainer.no_signal_steps",
        "trainer.no_signal_share",
        "trainer.max_failures",
        "trainer.seed",
        "trainer.ray_address",
    }
)

# Meanings of the fields the schema leaves uncommented, by (class, field): the schema's own comment wins where it
# has one (tests/app/config/test_reference.py checks that every key gets a meaning and that no entry here is stale).
MEANINGS = {
    ("DataConfig", "val_files"): "parquet / JSONL file(s) or a `save_to_disk` folder for validation",
    ("DataConfig", "truncation"): "a prompt over max_prompt_length: error names the row; left / right / middle cut it",
    ("DataConfig", "shuffle"): "shuffle the training prompts each epoch",
    ("DataConfig", "seed"): "seed of the training data order",
    ("ModelConfig", "lora_alpha"): "LoRA scaling numerator (the update is alpha / rank x B A)",
    ("ModelConfig", "target_modules"): "modules that get LoRA adapters: all-linear or a list of module names",
    ("ModelConfig", "enable_gradient_checkpointing"): "recompute activations in the backward pass (less memory, "
    "slower)",
    ("ModelConfig", "trust_remote_code"): "let transformers run the model folder's own Python code",
    ("CriticModelConfig", "enable_gradient_checkpointing"): "as actor_rollout_ref.model.enable_gradient_checkpointing",
    ("CriticModelConfig", "use_remove_padding"): "as actor_rollout_ref.model.use_remove_padding",
    ("CriticModelConfig", "trust_remote_code"): "as actor_rollout_ref.model.trust_remote_code",
    ("CriticModelConfig", "lora_alpha"): "as actor_rollout_ref.model.lora_alpha, for the critic's adapters",
    ("CriticModelConfig", "target_modules"): "as actor_rollout_ref.model.target_modules (the value head trains whole)",
    ("ActorConfig", "ppo_max_token_len_per_gpu"): "with use_dynamic_bsz: tokens per micro-batch on each rank",
    ("ActorConfig", "grad_clip"): "gradient norm clipping",
    ("ActorConfig", "clip_ratio"): "PPO clip range: the ratio is clipped to [1 - low, 1 + high]",
    ("ActorConfig", "loss_agg_mode"): "how token losses become one loss (docs/algorithms.md)",
    ("ActorConfig", "entropy_coeff"): "weight of the entropy bonus in the loss",
    ("ActorConfig", "kl_loss_coef"): "weight of the KL-to-reference loss (use_kl_loss)",
    ("ActorConfig", "kl_loss_type"): "KL estimator of the KL loss: kl (k1), abs, mse (k2), low_var_kl (k3); a + "
    "suffix takes k2's gradient",
    ("ActorConfig", "ppo_epochs"): "passes over each batch per step",
    ("ActorConfig", "shuffle"): "reshuffle the samples into mini-batches each epoch",
    ("CriticConfig", "strategy"): "fsdp / fsdp2 (both FSDP2) or deepspeed",
    ("CriticConfig", "ppo_micro_batch_size_per_gpu"): "samples per forward/backward; None: the whole mini-batch",
    ("CriticConfig", "use_dynamic_bsz"): "micro-batches by token budget instead of sample count",
    ("CriticConfig", "ppo_max_token_len_per_gpu"): "with use_dynamic_bsz: tokens per micro-batch on each rank",
    ("CriticConfig", "cliprange_value"): "value clip range around the old values",
    ("CriticConfig", "loss_agg_mode"): "how token value losses become one loss",
    ("CriticConfig", "grad_clip"): "gradient norm clipping",
    ("PolicyLossSection", "clip_cov_ub"): "clip_cov: upper bound of that range",
    ("OptimConfig", "lr"): "learning rate (AdamW)",
    ("OptimConfig", "weight_decay"): "AdamW weight decay",
    ("OptimConfig", "betas"): "AdamW betas",
    ("OptimConfig", "lr_warmup_steps_ratio"): "warm-up steps as a fraction of the run's steps (lr_warmup_steps -1)",
    ("FSDPConfig", "param_offload"): "keep the parameters on the CPU between uses (GPU)",
    ("FSDPConfig", "optimizer_offload"): "keep the optimizer state on the CPU (GPU)",
    ("MixedPrecisionConfig", "buffer_dtype"): "dtype of the model's buffers",
    ("RolloutConfig", "max_num_batched_tokens"): "vLLM: tokens per scheduler step",
    ("RolloutConfig", "max_num_seqs"): "vLLM: sequences per scheduler step",
    ("RolloutConfig", "enable_chunked_prefill"): "vLLM: split long prefills over steps",
    ("RolloutConfig", "temperature"): "sampling temperature of training rollouts",
    ("RolloutConfig", "top_p"): "nucleus sampling; 1: off",
    ("RolloutConfig", "ignore_eos"): "keep generating past the end-of-sequence token",
    ("RolloutConfig", "do_sample"): "false: greedy training rollouts",
    ("RolloutConfig", "http_port"): "port of the OpenAI routes",
    ("ValKwargs", "temperature"): "validation temperature (0: greedy)",
    ("ValKwargs", "top_p"): "validation nucleus sampling",
    ("ValKwargs", "top_k"): "validation top-k; -1: off",
    ("ValKwargs", "n"): "samples per validation prompt",
    ("ValKwargs", "do_sample"): "false: greedy validation",
    ("RewardModelConfig", "max_length"): "reward model: longest input in tokens; None: no limit",
    ("RewardModelPathConfig", "path"): "a sequence-classification model folder",
    ("RewardModelPathConfig", "trust_remote_code"): "let transformers run the folder's own code",
    ("OverlongBufferConfig", "enable"): "add the overlong penalty to the training reward",
    ("AlgorithmConfig", "gamma"): "discount (gae, reinforce_plus_plus)",
    ("AlgorithmConfig", "lam"): "GAE lambda",
    ("PFPPOConfig", "weight_pow"): "the power of reweight_method=pow",
    ("AlgorithmConfig", "use_kl_in_reward"): "subtract kl_ctrl.kl_coef x KL to the reference from the reward",
    ("KLCtrlConfig", "type"): "in-reward KL coefficient: fixed, or adaptive towards target_kl",
    ("KLCtrlConfig", "kl_coef"): "in-reward KL coefficient (its start value when adaptive)",
    ("KLCtrlConfig", "horizon"): "adaptive: steps over which the coefficient adapts",
    ("KLCtrlConfig", "target_kl"): "adaptive: the KL the coefficient steers towards",
    ("FilterGroupsConfig", "enable"): "turn dynamic sampling on",
    ("AsyncTrainingConfig", "enable"): "generate the next batch while the trainer updates on this one",
    ("TrainerConfig", "project_name"): "names the run (loggers, the Serve application, the output folder)",
    ("TrainerConfig", "experiment_name"): "names the run within the project",
    ("TrainerConfig", "total_epochs"): "passes over the training data",
    ("TrainerConfig", "num_workers"): "CPU training: ranks (Ray Train workers); None: 2",
    ("TrainerConfig", "cpus_per_worker"): "Ray CPUs each train worker holds (and its torch threads)",
    ("TrainerConfig", "val_before_train"): "validate once before the first step",
    ("TrainerConfig", "default_local_dir"): "the run folder: metrics, checkpoints, hf_model/",
    ("TrainerConfig", "seed"): "seed of the model init, sampling and the rollout",
}
# every field of these sections: the section's docstring says what they are
SECTION_MEANINGS = {"MultiTurnConfig": "verl's multi-turn rollout setting (docs/agents.md)"}

VERL_SAME = "verl"
VERL_OURS = "ours"
VERL_NO_EFFECT = "verl's; no effect here"
VERL_DEFAULT_ONLY = "verl's; its default only"


class Row(NamedTuple):
    key: str
    type: str
    default: str
    meaning: str
    verl: str


class Section(NamedTuple):
    path: str
    doc: str
    rows: list[Row]


# ---------------------------------------------------------------- reading the schema's comments
def _comments_by_line(source: str) -> dict[int, tuple[str, bool]]:
    """{line number: (comment text, whether the line holds only the comment)}."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            alone = not tok.line[: tok.start[1]].strip()
            out[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    return out


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """{(class name, field name): its comment}: the comment lines right above the field, then the comment on the
    field's own line(s)."""
    comments = _comments_by_line(source)
    out = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            above, line = [], stmt.lineno - 1
            while line in comments and comments[line][1]:
                above.insert(0, comments[line][0])
                line -= 1
            inline = [
                comments[n][0] for n in range(stmt.lineno, stmt.end_lineno + 1) if n in comments and not comments[n][1]
            ]
            text = " ".join(above + inline).strip()
            if text:
                out[(node.name, stmt.target.id)] = text
    return out


def class_docs(source: str) -> dict[str, str]:
    """{class name: its docstring} (a dataclass without one gets its signature as __doc__, which is not prose)."""
    return {
        node.name: ast.get_docstring(node) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }


# ---------------------------------------------------------------- describing types and values
def type_text(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        text = " or ".join(type_text(a) for a in options)
        return text + " or null" if type(None) in args else text
    if origin is Literal:
        return "one of " + ", ".join(value_text(a) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping {type_text(args[0])} to {type_text(args[1])}" if args else "mapping"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def value_text(value: Any) -> str:
    """A value as it is written in YAML or on the command line."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


# ---------------------------------------------------------------- the table
def verl_reason(key: str) -> str:
    """Why a verl key does nothing here, or only at verl's default (app.config.verl_compat); empty for other keys."""
    from app.config.verl_compat import DEFAULT_ONLY, NO_EFFECT

    return NO_EFFECT.get(key) or DEFAULT_ONLY.get(key) or ""


def verl_status(key: str, meaning: str) -> str:
    from app.config.verl_compat import DEFAULT_ONLY, NO_EFFECT

    if key in NO_EFFECT:
        return VERL_NO_EFFECT
    if key in DEFAULT_ONLY:
        return VERL_DEFAULT_ONLY
    if "ours, not verl's" in meaning or any(key == k or key.startswith(k + ".") for k in OURS):
        return VERL_OURS
    return VERL_SAME


def sections(root: Any = None, path: str = "", doc: str = "") -> Iterator[Section]:
    """One Section per dataclass of the config tree (the values of a default `TrainerRunConfig`, so a section built
    with other defaults, such as critic.optim's learning rate, shows its own), parents before children."""
    root = TrainerRunConfig() if root is None else root
    comments = field_comments(Path(schema.__file__).read_text())
    hints = typing.get_type_hints(type(root))
    rows, children = [], []
    for f in dataclasses.fields(root):
        key = f"{path}.{f.name}" if path else f.name
        value = getattr(root, f.name)
        cls_name = type(root).__name__
        # a verl key refused or without effect: verl_compat's reason, not the schema's comment above its group
        meaning = (
            verl_reason(key)
            or comments.get((cls_name, f.name))
            or MEANINGS.get((cls_name, f.name))
            or SECTION_MEANINGS.get(cls_name, "")
        )
        if dataclasses.is_dataclass(value):
            children.append((value, key, meaning))
            continue
        rows.append(Row(key, type_text(hints[f.name]), value_text(value), meaning, verl_status(key, meaning)))
    cls_doc = " ".join(class_docs(Path(schema.__file__).read_text()).get(type(root).__name__, "").split())
    yield Section(path, " ".join(p for p in (doc, cls_doc) if p), rows)
    for value, key, meaning in children:
        yield from sections(value, key, meaning)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


HEADER = """# Configuration reference

Generated from `app/config/schema.py` by `python -m app.config.reference`; `tests/app/config/test_reference.py`
fails when this page and the schema disagree. Every default is written once, in the schema; the YAML files in
`configs/` hold only what differs. Set any key on the command line (`python -m app.train key=value`) or in a YAML file.
A key that is not listed here is refused, naming the nearest valid key.

The **verl** column says whether verl's trainer config has the key: `verl` (same name and meaning), `ours` (this
framework's own setting), `verl's; no effect here` (accepted at any value, changes nothing here; the log says so), or
`verl's; its default only` (a verl feature not supported here: any other value is refused with a message).
"""


def render() -> str:
    parts = [HEADER]
    for section in sections():
        if not section.rows:
            if section.path and section.doc:
                parts.append(f"\n## `{section.path}`\n\n{section.doc}\n")
            continue
        title = section.path or "(top level)"
        level = "##" if section.path.count(".") == 0 else "###"
        parts.append(f"\n{level} `{title}`\n")
        if section.doc:
            parts.append(f"\n{section.doc}\n")
        parts.append("\n| key | type | default | meaning | verl |\n|---|---|---|---|---|\n")
        for r in section.rows:
            parts.append(f"| `{r.key}` | {_cell(r.type)} | `{_cell(r.default)}` | {_cell(r.meaning)} | {r.verl} |\n")
    return "".join(parts)


def main() -> int:
    DOC.write_text(render())
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
