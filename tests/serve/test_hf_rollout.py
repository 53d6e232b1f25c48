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
    client = deploy_rollout(
        replace(rollout_config, name="hf", http_api_key=API_KEY),
        vllm_tiny_model_dir,
        APP,
        trust_remote_code=False,
        route_prefix="/hf",
    )
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


def test_hf_fallback_follows_weight_and_adapter_updates(hf_rollout, hf_model, reference, vllm_tiny_model_dir):
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from app.engine.lora_merge import merge_lora_state_dict
    from serve import FullWeights, LoraAdapter, MergedLora, PolicyVersionMismatch
    from serve.payload import weights_sum

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

    # merged LoRA: folded into the model folder's base weights (not the version-1 weights), version 2's adapter gone
    folded = get_peft_model(
        AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    with torch.no_grad():
        for name, p in folded.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    merged = merge_lora_state_dict(folded.state_dict(), scaling=8 / 4)
    merged.pop("lm_head.weight")  # tied
    payload = MergedLora(folded.peft_config["default"].to_dict(), get_peft_model_state_dict(folded), dtype="float32")
    assert set(hf_rollout.update_weights(3, payload).values()) == {3}
    assert_replicas_loaded(hf_rollout, merged.values())
    folded = folded.merge_and_unload().eval()
    for s in hf_rollout.generate(PROMPTS, expect_version=3, validation=True):
        assert s.response_token_ids == reference.greedy(folded, PROMPTS[s.prompt_index], len(s.response_token_ids))

    # the same adapter with `round_to` (rollout.lora_fold_dtype): the wrapped weights on the bf16 grid, the rest exact
    wrapped = ("q_proj.weight", "v_proj.weight")
    rounded = {k: v.bfloat16().float() if k.endswith(wrapped) else v for k, v in merged.items()}
    assert weights_sum(rounded.values()) != pytest.approx(weights_sum(merged.values()), abs=1e-9, rel=0)
    payload.round_to = "bfloat16"
    assert set(hf_rollout.update_weights(4, payload).values()) == {4}
    assert_replicas_loaded(hf_rollout, rounded.values())


def test_hf_fallback_answers_chat_completions_to_the_api_key_alone(hf_rollout, rollout_config):
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}).encode()
    url = f"http://127.0.0.1:{rollout_config.http_port}/hf/v1"

    def post(headers):
        request = urllib.request.Request(
            f"{url}/chat/completions", data=body, headers={"Content-Type": "application/json", **headers}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    answer = post({"Authorization": f"Bearer {API_KEY}"})
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["system_fingerprint"] == "policy-v4"  # the version the test above ends at
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": API_KEY}):  # missing, wrong, bare
        with pytest.raises(urllib.error.HTTPError) as err:
            post(headers)
        assert err.value.code == 401 and "API key" in json.loads(err.value.read())["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{url}/models", timeout=60)
    assert err.value.code == 401


def test_with_two_replicas_a_replacement_starts_at_the_current_policy_and_every_replica_follows_updates(
    ray_cluster, vllm_tiny_model_dir, rollout_config
):
    """Several replicas (rollout.replicas): each update reaches every replica, and a replica that joins later (a
    restart here; Serve autoscaling starts replicas the same way) loads the current policy from the policy store
    before it serves. The transformers engine stands in for vLLM: the replica logic is the deployment's, shared."""
    import ray
    from ray import serve

    from serve import FullWeights, deploy_rollout, wait_for_replicas

    app = "test-rollout-hf-two"
    client = deploy_rollout(
        replace(rollout_config, name="hf", replicas=2, cpus_per_replica=0.5),
        vllm_tiny_model_dir,
        app,
        trust_remote_code=False,
        route_prefix=None,
    )
    try:
        from safetensors.torch import load_file

        # the checkpoint's own tensors, not the module's hf_model (an earlier test wraps that one in LoRA layers)
        torch.manual_seed(5)
        base = load_file(str(vllm_tiny_model_dir / "model.safetensors"))
        first = {k: v + 0.05 * torch.randn_like(v) for k, v in base.items() if k != "lm_head.weight"}
        versions = client.update_weights(1, FullWeights(first))
        assert len(versions) == 2 and set(versions.values()) == {1}
        victim, survivor = sorted(versions)
        (actor,) = [
            a
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{app}#") and a["name"].endswith(victim)
        ]
        ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)
        (newcomer,) = [r for r in wait_for_replicas(app, 2, timeout_s=240, exclude=[victim]) if r != survivor]
        # the newcomer missed version 1's broadcast, yet serves it: it replayed exactly version 1's tensors
        assert client.replica_versions() == {survivor: 1, newcomer: 1}
        assert_replicas_loaded(client, first.values())
        second = {k: v + 0.05 * torch.randn_like(v) for k, v in first.items()}
        assert client.update_weights(2, FullWeights(second)) == {survivor: 2, newcomer: 2}
        assert_replicas_loaded(client, second.values())
        prompts = PROMPTS * 4  # more chunks than replicas, spread by Serve: every sample at version 2
        samples = client.generate(prompts, expect_version=2, sampling=client.sampling(n=2, max_tokens=3))
        assert len(samples) == 2 * len(prompts) and {s.policy_version for s in samples} == {2}
    finally:
        serve.delete(app)
