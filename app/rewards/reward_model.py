"""Scores from a sequence-classification reward model (one logit per sequence)."""

from __future__ import annotations

from typing import Any, Sequence

import torch


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether ids from ``a`` mean the same text to ``b`` and both format chats alike."""
    if a is b:
        return True
    return (
        a.get_vocab() == b.get_vocab()
        and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)
        and a.all_special_tokens == b.all_special_tokens
    )


def compute_dtype_for(device: torch.device) -> torch.dtype:
    """bf16 on a GPU; on a CPU bf16 only where it is native (AVX512-BF16/AMX), else fp32 (see app.engine.precision)."""
    if device.type == "cuda":
        return torch.bfloat16
    from app.engine.precision import cpu_has_native_bf16

    return torch.bfloat16 if cpu_has_native_bf16() else torch.float32


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    from app.engine.spec import to_dtype

    return to_dtype(dtype, "reward_model dtype")


class RewardModelScorer:
    """Scores (prompt, response) pairs with ``AutoModelForSequenceClassification`` (``num_labels=1``).

    When the reward model's tokenizer differs from the policy's, responses are decoded with the policy tokenizer and
    the conversation is re-templated with the reward model's own chat template; otherwise the policy's prompt and
    response ids are scored as they are.

    Args:
        model_path: HF folder with the reward model and its tokenizer.
        policy_tokenizer: the policy's tokenizer (None: always re-template).
        max_length: longest scored sequence (None: no limit); longer ones lose tokens from the start, keeping the
            response.
        batch_size: sequences per forward pass.
        device: where the model runs (the worker's device: ``"cuda"`` is the GPU this process was given); the
            weights are loaded straight there.
        dtype: the weights' and the forward's dtype (a torch dtype or ``"bf16"``/``"fp32"``...); None: the compute
            dtype for ``device`` (``compute_dtype_for``). Scores come back as Python floats either way.
    """

    def __init__(
        self,
        model_path: str,
        policy_tokenizer: Any = None,
        max_length: int | None = None,
        batch_size: int = 8,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str | None = None,
        trust_remote_code: bool = False,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        dtype = compute_dtype_for(device) if dtype is None else _as_dtype(dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        # loaded where it runs and in the dtype it runs in: no fp32 host copy first
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_path, dtype=dtype, device_map=device, trust_remote_code=trust_remote_code
        ).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"reward model {model_path} has num_labels={self.model.config.num_labels}; expected 1")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"reward model tokenizer at {model_path} has neither a pad nor an EOS token")
        self.pad_token_id = int(pad)
        if self.model.config.pad_token_id is None:  # the model finds each sequence's last token through it
            self.model.config.pad_token_id = self.pad_token_id
        self.policy_tokenizer = policy_tokenizer
        self.retemplate = policy_tokenizer is None or not same_tokenizer(policy_tokenizer, self.tokenizer)
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        # HF pools the logit at the last token that is not the pad id; a response that ends with EOS == pad id would
        # then be scored one token early. Reading the per-token head output ourselves (the `score` head of Llama-,
        # Qwen-, Mistral-style models) lets the attention mask say where each sequence ends.
        self._per_token: list[torch.Tensor] = []
        head = getattr(self.model, "score", None)
        self._hooked = isinstance(head, torch.nn.Module)
        if self._hooked:
            head.register_forward_hook(lambda _m, _i, out: self._per_token.append(out))

    def conversation_texts(self, messages: Sequence[list[dict[str, str]]], responses: Sequence[str]) -> list[str]:
        """Each prompt's messages plus the response as the assistant turn, in the reward model's chat template."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("reward model tokenizer has no chat template; cannot format (prompt, response) pairs")
        return [
            self.tokenizer.apply_chat_template([*m, {"role": "assistant", "content": r}], tokenize=False)
            for m, r in zip(messages, responses)
        ]

    def score(self, messages: Sequence[list[dict[str, str]]], responses: Sequence[str]) -> list[float]:
        """One score per (chat messages, response text) pair, templated with the reward model's template."""
        if len(messages) != len(responses):
            raise ValueError(f"{len(messages)} prompts but {len(responses)} responses")
        texts = self.conversation_texts(messages, responses)
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return self.score_token_ids(ids)

    def score_ids(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        messages: Sequence[list[dict[str, str]]] | None = None,
    ) -> list[float]:
        """Score policy outputs: unpadded prompt and response ids from the policy tokenizer. ``messages`` (the raw
        chat prompts) are needed when the reward model re-templates."""
        if self.retemplate:
            if messages is None or self.policy_tokenizer is None:
                raise ValueError("the reward model uses another tokenizer: pass messages and set policy_tokenizer")
            texts = self.policy_tokenizer.batch_decode([list(r) for r in response_ids], skip_special_tokens=True)
            return self.score(messages, texts)
        return self.score_token_ids([list(p) + list(r) for p, r in zip(prompt_ids, response_ids)])

    @torch.no_grad()
    def score_token_ids(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        """Scores of ready-made reward-model token sequences (right-padded internally, in batches)."""
        scores: list[float] = []
        for start in range(0, len(sequences), self.batch_size):
            chunk = [list(s) for s in sequences[start : start + self.batch_size]]
            if self.max_length is not None:
                chunk = [s[-self.max_length :] for s in chunk]
            width = max(len(s) for s in chunk)
            input_ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, seq in enumerate(chunk):
                input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                attention_mask[row, : len(seq)] = 1
            self._per_token.clear()
            logits = self.model(
                input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device)
            ).logits
            if self._hooked and self._per_token:
                per_token = self._per_token[-1]  # (batch, width, 1)
                last = attention_mask.sum(dim=1) - 1
                logits = per_token[torch.arange(len(chunk)), last.to(per_token.device)]
            scores.extend(logits[:, 0].float().cpu().tolist())
        return scores
