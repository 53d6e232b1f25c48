"""Rollout-service benchmark: Serve throughput against raw vLLM, and weight-sync time against bytes.

    .venv/bin/python bench/rollout.py [--model DIR] [--prompts 32] [--tokens 64] [--threads 1]

Prints three figures from one run (SmolLM2-135M-Instruct bf16 by default, imported with `app.import_model`):
  1. tokens/s through Serve (`RolloutClient.generate`) / tokens/s of raw `vllm.LLM.generate`, same prompts, same
     sampling (temperature 1, ignore_eos, sampled-token log-probs, no detokenisation), same thread binding;
  2. full-weight sync: seconds for `update_weights(FullWeights(state_dict))`, and the bytes sent;
  3. LoRA sync (r=16, all linear layers): seconds and bytes, on a second deployment with LoRA enabled.

Thread placement (2-core machine): each replica's vLLM runs its OMP threads on `--threads` bound cores, the model
inside the replica's own process (serve.vllm_engine.engine_build_env); the raw run's worker gets the same cores
(VLLM_CPU_OMP_THREADS_BIND) in a worker process of its own, beside its busy engine-core scheduler (the figures below
were measured when the replica's vLLM had that layout too). Raw and Serve runs
alternate, against a raw engine kept up beside the deployment, so load from other users of the machine hits both.

Measured 2026-11 on the shared 2-core box (load average 5-14 from other jobs, so single runs vary by +-15%):
  --threads 1: Serve/raw 1.056 (5 pairs) and 1.043 (3 pairs), ~305-345 tok/s; LLMServer's completions API 1.055;
               full sync 1.09-1.16 s for 269 MB bf16 (first sync ~1.8 s); LoRA r=16 0.13-0.21 s for 19.5 MB.
  --threads 2: Serve ~303 tok/s, no faster. Raw was erratic (200-356 tok/s) because the OMP threads then share both
               cores with the busy engine-core scheduler. So keep one OMP thread per core left after the scheduler
               (omp_threads=None -> cpus_per_replica=1 here, what vLLM's own "auto" binding picks on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_prompts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[1] + [rng.randrange(100, 40000) for _ in range(length - 1)] for _ in range(count)]


def timed_runs(fn, repeats: int, warm: bool = True) -> list[float]:
    """tokens/s of each of `repeats` calls of fn() -> generated token count (after one warm-up call if `warm`)."""
    if warm:
        fn()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = fn()
        rates.append(tokens / (time.perf_counter() - start))
    return rates


class RawVLLM:
    """`vllm.LLM` with the engine settings and sampling the deployment uses; `run()` returns generated tokens."""

    def __init__(self, spec, prompts, tokens):
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        from serve.vllm_engine import cpu_bind_string

        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind_string(spec.cpu_threads, 0)
        self.llm = LLM(
            model=spec.model_path,
            dtype=spec.dtype,
            enforce_eager=True,
            seed=0,
            kv_cache_memory_bytes=spec.cpu_kv_cache_bytes,
            block_size=spec.cpu_block_size,
            max_model_len=spec.max_model_len,
            max_num_seqs=spec.max_num_seqs,
            logprobs_mode="processed_logprobs",
            disable_log_stats=True,
        )
        self.params = SamplingParams(
            temperature=1.0,
            max_tokens=tokens,
            ignore_eos=True,
            logprobs=0,
            flat_logprobs=True,
            detokenize=False,
            seed=0,
        )
        self.inputs = [TokensPrompt(prompt_token_ids=p) for p in prompts]

    def run(self) -> int:
        return sum(len(o.outputs[0].token_ids) for o in self.llm.generate(self.inputs, self.params, use_tqdm=False))

    def close(self) -> None:
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()  # stop its engine-core processes now, not at exit
            self.llm = None
            gc.collect()


def llmserver_runner(spec, prompts, tokens):
    """Deploy `ray.serve.llm.LLMServer` (the alternative we evaluated) and return a run() -> generated tokens.

    Same engine settings; token ids go in through `CompletionRequest(prompt=[ids])` and the sampled ids and
    log-probs come back as OpenAI logprobs ("token_id:N" strings), which is what a trainer would have to use.
    """
    from ray import serve
    from ray.serve.llm import LLMConfig, build_llm_deployment
    from ray.serve.llm.openai_api_models import CompletionRequest

    from serve.vllm_engine import cpu_bind_string

    config = LLMConfig(
        model_loading_config={"model_id": "policy", "model_source": spec.model_path},
        placement_group_config={"bundles": [{"CPU": 1}]},  # without it the replica asks for a GPU
        engine_kwargs=dict(
            dtype=spec.dtype,
            enforce_eager=True,
            seed=0,
            kv_cache_memory_bytes=spec.cpu_kv_cache_bytes,
            block_size=spec.cpu_block_size,
            max_model_len=spec.max_model_len,
            max_num_seqs=spec.max_num_seqs,
            logprobs_mode="processed_logprobs",
        ),
        runtime_env={"env_vars": {"VLLM_CPU_OMP_THREADS_BIND": cpu_bind_string(spec.cpu_threads, 0)}},
        deployment_config={"ray_actor_options": {"num_cpus": 0}, "max_ongoing_requests": 256},
    )
    handle = serve.run(build_llm_deployment(config), name="bench-llmserver", route_prefix=None)

    def run() -> int:
        streams = [
            handle.options(stream=True).completions.remote(
                CompletionRequest(
                    model="policy",
                    prompt=p,
                    max_tokens=tokens,
                    temperature=1.0,
                    logprobs=0,
                    ignore_eos=True,
                    return_tokens_as_token_ids=True,
                )
            )
            for p in prompts
        ]
        total = 0
        for stream in streams:
            response = list(stream)[-1]
            ids = [int(t.split(":")[1]) for t in response.choices[0].logprobs.tokens]
            total += len(ids)
        return total

    return run


def model_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="HF folder; default: import smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="OMP threads bound per vLLM worker")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--llmserver",
        action="store_true",
        help="also measure ray.serve.llm.LLMServer (completions API) against raw vLLM",
    )
    args = parser.parse_args()

    import ray
    import torch
    from ray import serve

    from app.config.schema import RolloutConfig
    from serve import FullWeights, LoraAdapter, deploy_rollout
    from serve.deployment import engine_spec_from_config

    if args.model is None:
        from app.import_model import import_model

        args.model = str(
            import_model("smollm2-135m-instruct", REPO / ".cache" / "test-models" / "smollm2-135m-instruct")
        )
    cfg = replace(
        RolloutConfig(),
        dtype="bfloat16",
        prompt_length=args.prompt_len,
        response_length=args.tokens,
        max_num_seqs=max(64, args.prompts),
        cpu_kv_cache_gib=1.0,
        cpus_per_replica=1.0,
        omp_threads=args.threads,
        replicas=1,
        temperature=1.0,
        ignore_eos=True,
        gpu_memory_utilization=0.5,
        enforce_eager=True,
    )  # a validated CPU config's (app/config/layout.py)
    spec = engine_spec_from_config(cfg, args.model, trust_remote_code=False)
    prompts = make_prompts(args.prompts, args.prompt_len)
    print(
        f"model={args.model} prompts={args.prompts}x{args.prompt_len} new_tokens={args.tokens} "
        f"threads={args.threads} cores={len(os.sched_getaffinity(0))} load_before={os.getloadavg()[0]:.2f}",
        flush=True,
    )

    # The raw engine stays up (idle engines sleep on their input queue) so raw and Serve runs can alternate: the
    # other users of this machine then load both sides alike.
    raw_engine = RawVLLM(spec, prompts, args.tokens)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        start = time.perf_counter()
        client = deploy_rollout(cfg, args.model, "bench-rollout", trust_remote_code=False, route_prefix=None)
        deploy_s = time.perf_counter() - start
        sampling = client.sampling(seed=0)

        def served() -> int:
            return sum(len(s.response_token_ids) for s in client.generate(prompts, expect_version=0, sampling=sampling))

        raw, via_serve = [], []
        raw_engine.run()
        served()  # warm-up
        for _ in range(args.repeats):
            raw += timed_runs(raw_engine.run, 1, warm=False)
            via_serve += timed_runs(served, 1, warm=False)
        llm_raw, llm_serve = [], []
        if args.llmserver:
            llmserver = llmserver_runner(spec, prompts, args.tokens)
            llmserver()  # warm-up
            for _ in range(args.repeats):
                llm_raw += timed_runs(raw_engine.run, 1, warm=False)
                llm_serve += timed_runs(llmserver, 1, warm=False)
            serve.delete("bench-llmserver")
        raw_engine.close()

        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
        state = {k: v for k, v in hf.state_dict().items() if k != "lm_head.weight"}  # tied to embed_tokens
        full_s = []
        for version in (1, 2):
            start = time.perf_counter()
            client.update_weights(version, FullWeights(state))
            full_s.append(time.perf_counter() - start)
        serve.delete("bench-rollout")

        from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

        peft_model = get_peft_model(hf, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
        adapter = LoraAdapter(peft_model.peft_config["default"].to_dict(), get_peft_model_state_dict(peft_model))
        lora_client = deploy_rollout(
            cfg, args.model, "bench-rollout-lora", trust_remote_code=False, max_lora_rank=16, route_prefix=None
        )
        lora_s = []
        for version in (1, 2):
            start = time.perf_counter()
            lora_client.update_weights(version, adapter)
            lora_s.append(time.perf_counter() - start)
        lora_client.generate(prompts[:2], expect_version=2, sampling=sampling)  # the adapter really serves
        serve.delete("bench-rollout-lora")
    finally:
        raw_engine.close()
        serve.shutdown()
        ray.shutdown()

    raw_med, serve_med = statistics.median(raw), statistics.median(via_serve)
    paired = statistics.median(s / r for s, r in zip(via_serve, raw))
    print(f"deploy (engine start) {deploy_s:.1f} s")
    print(f"raw vLLM tokens/s per run: {', '.join(f'{r:.1f}' for r in raw)}")
    print(f"Serve    tokens/s per run: {', '.join(f'{r:.1f}' for r in via_serve)}")
    print(
        f"[1] throughput ratio Serve/raw = {paired:.3f} (median of alternating pairs; medians {serve_med:.1f} / "
        f"{raw_med:.1f} tok/s)"
    )
    if llm_serve:
        ratio = statistics.median(s / r for s, r in zip(llm_serve, llm_raw))
        print(
            f"    LLMServer (completions API) tokens/s per run: {', '.join(f'{r:.1f}' for r in llm_serve)}; "
            f"ratio to raw = {ratio:.3f} (median of alternating pairs)"
        )
    nbytes = model_bytes(state)
    print(
        f"[2] full-weight sync: {full_s[-1]:.2f} s for {nbytes / 1e6:.1f} MB ({nbytes / 1e6 / full_s[-1]:.0f} MB/s; "
        f"first sync {full_s[0]:.2f} s)"
    )
    lbytes = model_bytes(adapter.tensors)
    print(
        f"[3] LoRA sync (r=16, all-linear): {lora_s[-1]:.2f} s for {lbytes / 1e6:.1f} MB (first sync {lora_s[0]:.2f} s)"
    )


if __name__ == "__main__":
    main()
