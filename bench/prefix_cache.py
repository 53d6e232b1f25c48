"""Generation time of `make run`'s rollouts on vLLM's CPU backend against the KV-cache block size.

vLLM's prefix cache keeps whole blocks only. At the CPU backend's default block of 128 tokens, a prompt shorter than
that is never cached, so each of its `rollout.n` samples computes it again; at `rollout.cpu_block_size` (32) the
samples share its full blocks. For each block size this bench builds one engine with the replica's engine arguments
(`serve.vllm_engine.engine_args`, from the quickstart's config, in a fresh process bound to the cores a replica
gets), then times `--rounds` training steps' generation (data.train_batch_size training prompts x rollout.n samples,
seeded) and one validation (data.val_max_samples prompts), each sampled as the replica samples it from the rollout
config (`serve.vllm_engine.vllm_sampling_params`: temperature, top-p, top-k, token limit; validation's `val_kwargs`,
greedy by default). The engines see the same prompts and seeds, so the bench also says whether every block size
sampled the same tokens.

    python bench/prefix_cache.py [--block-sizes 128,32] [--rounds 3] [key=value ...]

Extra `key=value` arguments are Hydra overrides of the quickstart's config. The model and data must be where
`make run` puts them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _config(overrides: list[str]):
    from app.config import compose_run_config

    return compose_run_config("quickstart", overrides)


def child(block_size: int, rounds: int, overrides: list[str]) -> dict:
    """One engine at `block_size`: seconds and sampled tokens of each training round, then of the validation."""
    from serve.deployment import engine_spec_from_config
    from serve.vllm_engine import engine_args, engine_build_env, vllm_sampling_params

    os.chdir(REPO)  # the config's model and data paths are relative to the repository, as for `make run`
    cfg = _config(overrides)
    model, rollout = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.rollout
    spec = engine_spec_from_config(
        dataclasses.replace(rollout, cpu_block_size=block_size), model.path, trust_remote_code=model.trust_remote_code
    )
    env = engine_build_env(spec, replica_rank=0)
    os.environ.update(env)
    import torch

    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))  # the config's loading imported torch already
    from transformers import AutoTokenizer
    from vllm import LLM
    from vllm.inputs import TokensPrompt

    from app.data import PromptDataOptions, load_prompt_dataset
    from serve.types import SamplingOptions

    tokenizer = AutoTokenizer.from_pretrained(model.path)
    options = PromptDataOptions.from_mapping(cfg.data)
    batch = cfg.data.train_batch_size
    train = list(load_prompt_dataset(cfg.data.train_files, tokenizer, options, max_samples=batch * (rounds + 1)))
    val = list(load_prompt_dataset(cfg.data.val_files, tokenizer, options, max_samples=cfg.data.val_max_samples))
    llm = LLM(**engine_args(spec, on_cpu=True))

    def generate(records, params) -> tuple[float, list[list[int]]]:
        prompts = [TokensPrompt(prompt_token_ids=r.prompt_ids) for r in records]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        return seconds, [list(c.token_ids) for o in outputs for c in sorted(o.outputs, key=lambda c: c.index)]

    # the replica's sampling of a training round and of a validation, from the config
    train_opts = SamplingOptions.from_rollout_config(rollout)
    sampled = [vllm_sampling_params(train_opts, train_opts.n, seed=i) for i in range(rounds + 1)]
    generate(train[:batch], sampled[0])  # warm-up: the first generation builds kernels
    seconds, tokens = [], []
    for i in range(1, rounds + 1):
        s, t = generate(train[i * batch : (i + 1) * batch], sampled[i])
        seconds.append(s)
        tokens.append(t)
    val_opts = SamplingOptions.from_rollout_config(rollout, validation=True)
    val_seconds, val_tokens = generate(val, vllm_sampling_params(val_opts, val_opts.n, seed=None))
    return {
        "block_size": block_size,
        "round_s": seconds,
        "val_s": val_seconds,
        "tokens": tokens + [val_tokens],
        "mean_prompt_tokens": statistics.mean(len(r.prompt_ids) for r in train),
    }


def format_rows(results: list[dict]) -> list[str]:
    """A line per block size: mean and each round's seconds, validation seconds, speed against the first block size
    and whether its tokens equal the first block size's."""
    first = results[0]
    lines = [f"{'block':>6} {'step gen s (mean)':>18}  rounds{'':14} {'val s':>7} {'vs first':>9}  same tokens"]
    for r in results:
        mean = statistics.mean(r["round_s"])
        rounds = " ".join(f"{s:.2f}" for s in r["round_s"])
        ratio = statistics.mean(first["round_s"]) / mean
        lines.append(
            f"{r['block_size']:>6} {mean:>18.2f}  {rounds:<20} {r['val_s']:>7.2f} {ratio:>8.2f}x  "
            f"{'yes' if r['tokens'] == first['tokens'] else 'no'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-sizes", default="128,32", help="comma-separated multiples of 32 (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="timed training steps per block size (default 3)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args, overrides = parser.parse_known_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.rounds, overrides)))
        return 0
    sizes = [int(s) for s in args.block_sizes.split(",")]
    results = []
    for size in sizes:  # each engine in a process of its own: no kernels or heap carried from the previous one
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(size), "--rounds", str(args.rounds), *overrides],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            sys.stderr.write(proc.stderr[-3000:])
            return proc.returncode
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"mean prompt: {results[0]['mean_prompt_tokens']:.1f} tokens")
    print("\n".join(format_rows(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
