"""`rollout.name=hf`: the transformers fallback behind the same deployment and client as vLLM.

Its log-probs come from `generate`'s processed scores; they must equal a plain forward pass at logits / temperature
to 1e-4 (same fp32 kernels on both sides, only the batch layout of the KV cache differs).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace

import pytest
import torch

from support import assert_replicas_loaded

pytestmark = pytest.mark.slow

APP = "test-rollout-hf"
API_KEY = "sk-test-4f2c"
PROMPTS = [[1, 17, 923, 88, 4051], [1, 3300, 12, 7]]


@pytest.fixture(scope="module")
def hf_rollout(ray_cluster, vllm_tiny_model_dir, rollout_config):
    from ray import serve

    from serve import deploy_rollout

    # with an API key, as a run whose http_host is not loopback has: the HTTP test sends it (the handle needs none)
    client = deploy_rollout(replace(rollout_config, name="hf", http_api_key=API_KEY), vllm_tiny_model_dir, APP,
                            trust_remote_code=False, route_prefix="/hf")
    try:
        yield client
    finally:
        serve.delete(APP)


@pytest.fixture(scope="module")
def hf_model(vllm_tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32).eval()


def test_hf_fallback_returns_the_same_structure(hf_rollout, hf_model, reference):
    sampling = hf_rollout.sampling(temperature=0.7, n=2, max_tokens=5, ignore_eos=True, seed=3)
    samples = hf_rollout.generate(PROMPTS, expect_version=0, sampling=sampling)

    assert [(s.prompt_index, s.sample_index) for s in samples] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(len(s.response_token_ids) == len(s.logprobs) == 5 for s in samples)
    assert all(s.finish_reason == "length" and s.policy_version == 0 for s in samples)
    for s in samples:
        expected = reference.logprobs(hf_model, PROMPTS[s.prompt_index], s.response_token_ids, 0.7)
        assert torch.allclose(torch.tensor(s.logprobs), expected, atol=1e-4, rtol=0)


def test_hf_fallback_follows_weight_and_adapter_updates(hf_rollout, hf_model, reference):
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    from serve import FullWeights, LoraAdapter, PolicyVersionMismatch

    torch.manual_seed(4)
    new_state = {k: v + 0.05 * torch.randn_like(v) for k, v in hf_model.state_dict().items() if k != "lm_head.weight"}
    assert set(hf_rollout.update_weights(1, FullWeights(new_state)).values()) == {1}
    assert_replicas_loaded(hf_rollout, new_state.values())
    hf_model.load_state_dict(new_state, strict=False)
    greedy = hf_rollout.generate(PROMPTS, expect_version=1, validation=True)
    for s in greedy:
        assert s.response_token_ids == reference.greedy(hf_model, PROMPTS[s.prompt_index], len(s.response_token_ids))
    with pytest.raises(PolicyVersionMismatch, match="expected version 0"):
        hf_rollout.generate(PROMPTS, expect_version=0)

    peft_model = get_peft_model(hf_model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    peft_model.eval()
    adapter = LoraAdapter(peft_model.peft_config["default"].to_dict(), get_peft_model_state_dict(peft_model))
    assert set(hf_rollout.update_weights(2, adapter).values()) == {2}
    greedy = hf_rollout.generate(PROMPTS, expect_version=2, validation=True)
    for s in greedy:
        assert s.policy_version == 2
        expected = reference.logprobs(peft_model, PROMPTS[s.prompt_index], s.response_token_ids)
        assert torch.allclose(torch.tensor(s.logprobs), expected, atol=1e-4, rtol=0)


def test_hf_fallback_answers_chat_completions_to_the_api_key_alone(hf_rollout, rollout_config):
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}).encode()
    url = f"http://127.0.0.1:{rollout_config.http_port}/hf/v1"

    def post(headers):
        request = urllib.request.Request(f"{url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json", **headers})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    answer = post({"Authorization": f"Bearer {API_KEY}"})
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["system_fingerprint"] == "policy-v2"
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": API_KEY}):  # missing, wrong, bare
        with pytest.raises(urllib.error.HTTPError) as err:
            post(headers)
        assert err.value.code == 401 and "API key" in json.loads(err.value.read())["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{url}/models", timeout=60)
    assert err.value.code == 401
