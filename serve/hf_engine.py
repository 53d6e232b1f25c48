"""`rollout.name=hf`: the same engine operations with transformers `generate`, for machines without vLLM.

Slow (no paged attention, no continuous batching) but dependency-light. Log-probs follow the same rule as the vLLM
engine: the scores `generate` samples from (logits / temperature, then top-k/top-p filtering), log-softmaxed; for
greedy decoding no warper runs, so they are log_softmax(logits). LoRA adapters are merged into a fresh copy of the
base weights with peft, so each version is exactly base + adapter.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, AsyncIterator, Iterator, Optional

from serve.payload import iter_safetensors
from serve.types import GeneratedSequence, RolloutEngineSpec, SamplingOptions, TokenDelta

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "float32": "float32",
    "fp32": "float32",
}


class HFRolloutEngine:
    def __init__(self, spec: RolloutEngineSpec, replica_rank: int = 0):
        self.spec = spec
        self.replica_rank = replica_rank
        self._model = None
        self._base_state: Optional[dict] = None  # pristine base weights, kept only once a LoRA adapter arrives
        self._lock = asyncio.Lock()  # one generate or load at a time: the model is not re-entrant

    async def start(self) -> None:
        await asyncio.to_thread(self._load)

    def _load(self) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        dtype = getattr(torch, _DTYPES.get(self.spec.dtype, self.spec.dtype))
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        if self._device == "cpu":
            torch.set_num_threads(max(1, self.spec.cpu_threads))
        config = AutoConfig.from_pretrained(self.spec.model_path, trust_remote_code=self.spec.trust_remote_code)
        for key, value in self.spec.hf_overrides.items():  # as the trainer's engine sets them (app.engine.hf_model)
            setattr(config, key, value)
        self._model = (
            AutoModelForCausalLM.from_pretrained(
                self.spec.model_path, config=config, dtype=dtype, trust_remote_code=self.spec.trust_remote_code
            )
            .to(self._device)
            .eval()
        )
        tokenizer = AutoTokenizer.from_pretrained(self.spec.tokenizer_folder)
        self._eos_ids = _eos_ids(self._model, tokenizer)
        # generate() fills an unset eos_token_id from the model's generation config, which would make ignore_eos
        # stop at EOS anyway; so the model keeps none and each call passes its own.
        self._model.generation_config.eos_token_id = None
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._eos_ids[0]
        torch.manual_seed(self.spec.seed)

    async def shutdown(self) -> None:
        self._model = None

    async def check_health(self) -> None:
        if self._model is None:
            raise RuntimeError("transformers rollout engine is not loaded")

    # ------------------------------------------------------------------ generation
    async def generate(self, prompts: list[list[int]], opts: SamplingOptions) -> list[list[GeneratedSequence]]:
        async with self._lock:
            return await asyncio.to_thread(self._generate, prompts, opts)

    async def stream(self, prompt: list[int], opts: SamplingOptions) -> AsyncIterator[list[TokenDelta]]:
        """transformers `generate` has no step callbacks that fit an async stream: each choice comes whole, in one
        delta (a valid stream, just not incremental)."""
        (seqs,) = await self.generate([prompt], opts)
        yield [TokenDelta(i, s.token_ids, s.finish_reason) for i, s in enumerate(seqs)]

    def _generate(self, prompts: list[list[int]], opts: SamplingOptions) -> list[list[GeneratedSequence]]:
        import torch
        from transformers import GenerationConfig

        runs = 1 if opts.greedy else opts.n
        config = GenerationConfig(
            do_sample=opts.do_sample,
            temperature=opts.temperature if opts.do_sample else None,
            top_p=opts.top_p if opts.do_sample else None,
            top_k=(opts.top_k if opts.top_k > 0 else 0) if opts.do_sample else None,
            max_new_tokens=opts.max_tokens,
            num_return_sequences=runs,
            # With ignore_eos nothing stops early; the EOS id stays a legal token, as in vLLM.
            eos_token_id=None if opts.ignore_eos else self._eos_ids,
            pad_token_id=self._pad_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
        out: list[list[GeneratedSequence]] = []
        for index, ids in enumerate(prompts):  # one prompt at a time: no padding, so no pad-position effects
            if opts.seed is not None:
                torch.manual_seed(opts.seed + index)
            input_ids = torch.tensor([list(ids)], device=self._device)
            with torch.no_grad():
                result = self._model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config
                )
            new = result.sequences[:, input_ids.shape[1] :]
            # scores[t]: (runs, vocab) processed logits at step t; log-softmax then pick the sampled token.
            steps = torch.stack(result.scores, dim=1).float().log_softmax(dim=-1)
            chosen = steps.gather(-1, new[:, : steps.shape[1]].unsqueeze(-1)).squeeze(-1)
            seqs = [self._trim(new[r].tolist(), chosen[r].tolist(), opts) for r in range(runs)]
            out.append(seqs if runs == opts.n else seqs * opts.n)
        return out

    def _trim(self, ids: list[int], logprobs: list[float], opts: SamplingOptions) -> GeneratedSequence:
        if not opts.ignore_eos:
            for t, token in enumerate(ids):
                if token in self._eos_ids:  # keep the EOS token, drop the padding after it (vLLM keeps it too)
                    return GeneratedSequence(ids[: t + 1], logprobs[: t + 1], "stop")
        return GeneratedSequence(ids, logprobs, "length")

    # ------------------------------------------------------------------ weights
    async def load_full_weights(self, paths: list[str]) -> None:
        async with self._lock:
            await asyncio.to_thread(lambda: self._copy_weights(iter_safetensors(paths)))

    async def load_merged_lora(self, adapter_dir: str, dtype: str, round_to: Optional[str] = None) -> None:
        from serve.lora_fold import iter_folded_adapter

        async with self._lock:
            await asyncio.to_thread(
                lambda: self._copy_weights(
                    iter_folded_adapter(self.spec.model_path, adapter_dir, dtype, round_to=round_to)
                )
            )

    def _copy_weights(self, items: Iterator[tuple[str, Any]]) -> None:
        import torch

        params = dict(self._model.named_parameters())
        tied = getattr(self._model.config, "tie_word_embeddings", False)
        with torch.no_grad():
            for name, tensor in items:
                if name not in params:
                    if tied and name == "lm_head.weight":
                        continue  # tied to the input embedding, which the payload also carries
                    raise KeyError(f"full-weights payload has tensor {name!r}, which the model does not have")
                params[name].copy_(tensor.to(params[name].dtype))
        self._base_state = None

    async def load_lora(self, adapter_dir: str, name: str) -> None:
        async with self._lock:
            await asyncio.to_thread(self._merge_lora, adapter_dir)

    def _merge_lora(self, adapter_dir: str) -> None:
        import torch
        from peft import PeftModel

        if self._base_state is None:
            self._base_state = {k: v.detach().clone() for k, v in self._model.state_dict().items()}
        else:
            with torch.no_grad():
                self._model.load_state_dict(self._base_state)
        self._model = PeftModel.from_pretrained(self._model, adapter_dir).merge_and_unload().eval()

    async def reset_prefix_cache(self) -> None:
        return None  # no cache survives between generate calls

    async def weights_checksum(self) -> dict:
        """As the vLLM engine's: `digest` of the state dict; `weights_sum` of the parameters this model holds (a tied
        LM head once, as the trainer sends it), which here are readable at any time."""
        from serve.payload import weights_sum

        digest = hashlib.sha256()
        for name, tensor in sorted(self._model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
        return {"digest": digest.hexdigest()[:16], "weights_sum": weights_sum(self._model.parameters())}

    async def sleep(self, level: int = 1) -> None:
        return None  # nothing to free on the fallback

    async def wake_up(self) -> None:
        return None

    async def is_sleeping(self) -> bool:
        return False


def _eos_ids(model, tokenizer) -> list[int]:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = eos if isinstance(eos, list) else [eos]
    return [int(i) for i in ids if i is not None]
