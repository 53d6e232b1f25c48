"""vLLM's reload warning is kept only for layers that should have loaded (serve.vllm_worker.ExpectedReloadGaps)."""

import logging

import torch

from serve.vllm_worker import LAYERWISE_RELOAD_LOGGER, ExpectedReloadGaps, _tied_followers, expected_reload_gaps


class Rotary(torch.nn.Module):  # like vLLM's RotaryEmbedding: a cache buffer, no parameters
    def __init__(self):
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.zeros(4, 2))


class Head(torch.nn.Module):
    def __init__(self, weight: torch.nn.Parameter):
        super().__init__()
        self.weight = weight  # the embedding's own Parameter object: tied
        self.quant_method = object()  # vLLM's linear layers carry one; _tied_followers re-processes only those


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 2)
        self.rotary = Rotary()
        self.proj = torch.nn.Linear(2, 2)  # parameters and no buffers: must still warn when it loads nothing
        self.norm = torch.nn.BatchNorm1d(2)  # parameters and buffers: a real layer, must still warn
        self.head = Head(self.embed.weight)


def test_tied_head_and_parameterless_layers_are_the_expected_gaps():
    model = TinyModel()
    assert expected_reload_gaps(model, _tied_followers(model)) == {"Head", "Rotary"}


def test_the_filter_drops_only_the_expected_layers_warnings(caplog):
    vllm_logger = logging.getLogger(LAYERWISE_RELOAD_LOGGER)
    gap_filter = ExpectedReloadGaps(frozenset({"Head", "Rotary"}))
    vllm_logger.addFilter(gap_filter)
    try:
        with caplog.at_level(logging.WARNING, logger=LAYERWISE_RELOAD_LOGGER):
            for layer in ("Head", "Rotary", "Linear"):
                vllm_logger.warning("%s: Failed to load weights", layer)
            vllm_logger.warning("%s: some other problem", "Head")
    finally:
        vllm_logger.removeFilter(gap_filter)
    assert [record.getMessage() for record in caplog.records] == [
        "Linear: Failed to load weights",
        "Head: some other problem",
    ]
