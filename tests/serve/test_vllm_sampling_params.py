"""The vLLM sampling parameters a replica asks for, from the trainer's sampling options."""

from __future__ import annotations

from vllm.sampling_params import RequestOutputKind

from serve.types import SamplingOptions
from serve.vllm_engine import vllm_sampling_params


def test_sampling_keeps_temperature_and_top_p_and_maps_top_k_off_to_vllms_zero():
    params = vllm_sampling_params(SamplingOptions(max_tokens=8, temperature=0.7, top_p=0.9, top_k=-1, n=4), 4, seed=3)
    assert (params.temperature, params.top_p, params.top_k) == (0.7, 0.9, 0)
    assert (params.n, params.seed, params.max_tokens) == (4, 3, 8)
    assert params.logprobs == 0  # the sampled token's log-prob, which the trainer compares with its own
    assert params.output_kind == RequestOutputKind.FINAL_ONLY


def test_a_top_k_is_passed_as_it_is():
    assert vllm_sampling_params(SamplingOptions(max_tokens=8, temperature=1.0, top_k=20), 2, seed=None).top_k == 20


def test_greedy_options_ignore_their_sampling_values_and_a_stream_gets_deltas():
    opts = SamplingOptions(max_tokens=8, temperature=0.7, top_p=0.9, top_k=20, do_sample=False)
    params = vllm_sampling_params(opts, 1, seed=None, stream=True)
    assert (params.temperature, params.top_p, params.top_k) == (0.0, 1.0, 0)
    assert params.output_kind == RequestOutputKind.DELTA
