"""What each key of verl's trainer config does here: read with verl's meaning, accepted with no effect (logged), or
accepted at verl's default only (refused otherwise, naming the key and why).

The lists that decide it live in app/config/verl_compat.py (NO_EFFECT, DEFAULT_ONLY) and below (keys read
with a mapping or a limit); `classify` puts them together for docs/verl_keys.md and its test. A verl key list is a
text file of `dotted.key = <JSON default>` lines (tests/app/config/verl_keys_<commit>.txt names the verl commit);
`python -m app.config.verl_keys <that file>` prints the docs page.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import typing
from pathlib import Path
from typing import Any, Iterator

from app.config.schema import TrainerRunConfig
from app.config.verl_compat import DEFAULT_ONLY, NO_EFFECT

READ, NO_EFFECT_CLASS, DEFAULT_ONLY_CLASS = "read", "no effect", "verl's default only"

_SP = "Ulysses sequence parallelism on FSDP2: groups of this many ranks share each sequence (docs/gpu_engine.md)"
_SP_COPY = "verl's engine-level copy of the role's key, which is the one read: 1 or the role's value"
_FSDP_SIZE = (
    "-1 (or the rank count or more): one copy sharded over all ranks; a divisor of the rank count: hybrid sharding "
    "(FSDP2, docs/gpu_engine.md)"
)
_CKPT = "checkpoints always hold model, optimizer and extra: that set only (any order)"
_ACTOR_CKPT = "model, optimizer and extra always (any order); hf_model adds a Hugging Face copy in actor/huggingface/"

# read here, with a mapping onto this framework's keys or a check that they agree
READ_NOTES = {
    "actor_rollout_ref.model.external_lib": "imported by the train workers, the replicas, the pre-flight checks "
    "(which then read a model type it registers) and the pipelines' MLflow save; one name or a list, as verl's "
    "import_external_libs takes",
    "critic.model.external_lib": "imported by the train workers, where the critic is built",
    "reward_model.model.external_lib": "imported by the train workers, where the reward model is built",
    "trainer.default_hdfs_dir": "any filesystem pyarrow opens (hdfs://, s3://, gs://, a folder); the whole "
    "global_step_<N> folder is copied, and runs resume from default_local_dir (verl refuses to resume with it set)",
    "actor_rollout_ref.rollout.name": "vllm or hf; sglang is served by vLLM, with a warning saying so",
    "actor_rollout_ref.ref.strategy": "must be the actor's (the reference runs on the actor's engine)",
    "actor_rollout_ref.model.tokenizer_path": "a local folder: the prompts, vLLM, the replicas' OpenAI routes and the "
    "exported hf_model/ use its tokenizer; one with more tokens than the model embeds is refused before Ray starts",
    "critic.model.tokenizer_path": "must be the policy's tokenizer folder, actor_rollout_ref.model.tokenizer_path or "
    "model.path (the critic reads the policy's tokens)",
    "critic.enable": "must agree with algorithm.adv_estimator (gae runs a critic)",
    "trainer.resume_from_path": "with resume_mode=resume_path, becomes resume_mode (the path)",
    "trainer.resume_mode": "auto, disable, resume_path (with resume_from_path) or a checkpoint path",
    "trainer.max_actor_ckpt_to_keep": "one limit covers actor and critic: sets trainer.max_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep": "one limit covers actor and critic: sets trainer.max_ckpt_to_keep",
    "reward_model.micro_batch_size": "verl's older global name, divided by the ranks",
    "actor_rollout_ref.actor.optim.warmup_style": "also spelled optim.lr_scheduler_type (newer verl)",
    "critic.optim.warmup_style": "also spelled optim.lr_scheduler_type (newer verl)",
    "actor_rollout_ref.actor.optim.clip_grad": "newer verl's name for actor.grad_clip, which it sets",
    "critic.optim.clip_grad": "newer verl's name for critic.grad_clip, which it sets",
    "actor_rollout_ref.actor.tis_imp_ratio_cap": "> 0 sets algorithm.rollout_correction.rollout_is=token with "
    "rollout_is_threshold=<the cap> (the same weight), verl's later name for it",
    "actor_rollout_ref.model.override_config": "set on the model's config by the trainer's engines and vLLM "
    "(hf_overrides); names the model's config lacks are refused before Ray starts",
    "critic.model.override_config": "set on the critic's model config; names it lacks are refused before Ray starts",
    "ray_kwargs.ray_init.num_cpus": "passed to ray.init with the rest of ray_kwargs.ray_init (app.trainer.ray_init); "
    "null: the CPUs the run holds or the machine's, whichever is more",
    "ray_kwargs.timeline_json_file": "after training, ray.timeline writes the run's Chrome trace there",
    "actor_rollout_ref.actor.checkpoint.save_contents": _ACTOR_CKPT,
    "actor_rollout_ref.actor.checkpoint.load_contents": _ACTOR_CKPT,
}

# accepted at verl's default only, by checks of their own in verl_compat.check_unsupported
LIMITED = {
    "critic.checkpoint.save_contents": _CKPT,
    "critic.checkpoint.load_contents": _CKPT,
}


def classify(key: str) -> tuple[str, str]:
    """(class, why) of one dotted verl key; KeyError for a key nothing here accounts for."""
    for table, kind in (
        (DEFAULT_ONLY, DEFAULT_ONLY_CLASS),
        (LIMITED, DEFAULT_ONLY_CLASS),
        (NO_EFFECT, NO_EFFECT_CLASS),
    ):
        for prefix, why in table.items():
            if key == prefix or key.startswith(prefix + "."):  # a key inside a section kept as plain data
                return kind, why
    name = key.rsplit(".", 1)[-1]
    if name == "ulysses_sequence_parallel_size":
        return READ, _SP_COPY if ".fsdp_config." in key else _SP
    if name == "fsdp_size":
        return READ, _FSDP_SIZE
    leaves = schema_leaf_keys()
    if key in leaves or any(key.startswith(leaf + ".") for leaf in leaves):  # or inside a read mapping (ray_init)
        return READ, READ_NOTES.get(key, "")
    raise KeyError(key)


def schema_leaf_keys(cls: type = TrainerRunConfig, prefix: str = "") -> set[str]:
    """Every dotted key of the schema whose value is not a section."""
    hints = typing.get_type_hints(cls)
    out = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out |= schema_leaf_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            out.add(f"{prefix}{f.name}")
    return out


def read_key_list(path: Path) -> list[tuple[str, Any]]:
    """(dotted key, verl's default) from a key-list file; `#` lines are its header."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            key, value = line.split(" = ", 1)
            out.append((key, json.loads(value)))
    return out


def ours_only(verl_keys: list[str]) -> list[str]:
    """Schema keys verl does not have (nor holds inside one of its plain-data sections)."""
    covered = set(verl_keys)
    prefixes = {k.rsplit(".", i)[0] for k in verl_keys for i in range(1, k.count(".") + 1)}
    return sorted(k for k in schema_leaf_keys() if k not in covered and k not in prefixes)


def _rows(keys: list[tuple[str, Any]]) -> Iterator[str]:
    for key, default in keys:
        kind, why = classify(key)
        yield f"| `{key}` | `{json.dumps(default)}` | {kind} | {why} |"


def docs_page(keys: list[tuple[str, Any]], source: str) -> str:
    """docs/verl_keys.md: every verl key with its class and why, then the schema keys that are ours only."""
    names = [k for k, _ in keys]
    counts = {kind: sum(classify(k)[0] == kind for k in names) for kind in (READ, NO_EFFECT_CLASS, DEFAULT_ONLY_CLASS)}
    lines = [
        "# verl's config keys here",
        "",
        f"Every key of verl's PPO trainer config ({source}), {len(names)} keys, and what it does here. Any of them "
        "can be given on the command line as in verl (`key=value`, no `+`), and each is one of:",
        "",
        f"- **{READ}** ({counts[READ]}): the schema has it with verl's meaning (app/config/schema.py documents it); "
        "a note says where it maps onto another key or must agree with one;",
        f"- **{NO_EFFECT_CLASS}** ({counts[NO_EFFECT_CLASS]}): accepted at any value; a value other than the default "
        "is logged once at load, naming the key and why it changes nothing here;",
        f"- **{DEFAULT_ONLY_CLASS}** ({counts[DEFAULT_ONLY_CLASS]}): accepted at verl's default, refused at any other "
        "value with a message that names the key and why.",
        "",
        "Ulysses sequence parallelism (`*.ulysses_sequence_parallel_size` > 1) runs on the FSDP2 engine for the "
        "actor, the reference and the critic; the data-parallel size is then ranks / size, as in verl. "
        "`actor_rollout_ref.rollout.name=sglang` is accepted: vLLM serves "
        "the run with the same sampling keys and a warning says so (refusing would stop verl scripts whose only "
        "difference is the engine, and SGLang's sampling parameters mean the same as vLLM's).",
        "",
        "Generated by `python -m app.config.verl_keys tests/app/config/verl_keys_b2df6f8.txt`; "
        "tests/app/config/test_verl_keys.py checks that this page, the key list and the schema agree.",
        "",
        "| key | verl default | here | why |",
        "|---|---|---|---|",
        *_rows(keys),
        "",
        "## Keys of this framework that this verl config does not have",
        "",
        "Some are verl's from other releases or recipes (DAPO's `algorithm.filter_groups`, `data.gen_batch_size`, "
        "`reward_model.overlong_buffer`); the rest are this framework's own.",
        "",
        ", ".join(f"`{k}`" for k in ours_only(names)),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    path = Path(argv[0])
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    commit = next((w for line in header for w in line.split() if len(w.strip(".,")) == 40), "?").strip(".,")
    sys.stdout.write(docs_page(read_key_list(path), f"github.com/volcengine/verl at {commit}"))


if __name__ == "__main__":
    main(sys.argv[1:])
