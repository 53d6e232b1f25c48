"""The vLLM rollout service end to end on CPU: one deployment (tiny fp32 Llama, 1 GiB KV cache) shared by the module.

The tests run in file order and each advances the shared policy; `policy` records what the replicas should serve
(version, the HF model equal to it), so each test compares vLLM against transformers on the current weights.

Log-prob tolerance: 1e-4 absolute. Both sides run the same fp32 weights and differ only in kernels (vLLM-CPU's
repacked GEMMs and paged attention vs. torch's); on this model their rounding moved log-probs by at most 1.9e-6
(measured over 16 prompts x 2 samples x 16 tokens at temperatures 0.7 and 1). A wrong temperature, a wrong token
position or stale weights moves them by >= 0.05 (checked below), so 1e-4 separates the two with margin both ways.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from dataclasses import dataclass

import pytest
import torch
from support import assert_replicas_loaded

pytestmark = pytest.mark.slow

ATOL = 1e-4
APP = "test-rollout-vllm"
PROMPTS = [[1, 17, 923, 88, 4051], [1, 3300, 12, 7], [1, 42, 42, 42, 42, 42, 900, 31]]


@dataclass
class Policy:
    version: int
    model: torch.nn.Module  # transformers model equal to what the replicas serve


@pytest.fixture(scope="module")
def rollout(ray_cluster, vllm_tiny_model_dir, rollout_config):
    from ray import serve

    from serve import deploy_rollout

    client = deploy_rollout(rollout_config, vllm_tiny_model_dir, APP, trust_remote_code=False, max_lora_rank=8, seed=0)
    try:
        yield client
    finally:
        serve.delete(APP)


@pytest.fixture(scope="module")
def policy(vllm_tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32).eval()
    return Policy(0, model)


def _assert_logprobs_match(reference, samples, model, prompts, temperature):
    for s in samples:
        expected = reference.logprobs(model, prompts[s.prompt_index], s.response_token_ids, temperature)
        got = torch.tensor(s.logprobs)
        assert torch.allclose(got, expected, atol=ATOL, rtol=0), (s.prompt_index, (got - expected).abs().max())


def test_samples_have_shapes_and_logprobs_of_the_policy(rollout, policy, reference):
    sampling = rollout.sampling(temperature=0.7, n=3, max_tokens=6, ignore_eos=True, seed=7)
    samples = rollout.generate(PROMPTS, expect_version=0, sampling=sampling)

    # 3 prompts x n=3, sorted by (prompt, sample); ignore_eos makes every response exactly max_tokens long.
    assert [(s.prompt_index, s.sample_index) for s in samples] == [(p, j) for p in range(3) for j in range(3)]
    assert all(len(s.response_token_ids) == len(s.logprobs) == 6 for s in samples)
    assert all(s.finish_reason == "length" and s.policy_version == 0 for s in samples)
    assert len({tuple(s.response_token_ids) for s in samples}) > 3  # sampling, not greedy copies
    _assert_logprobs_match(reference, samples, policy.model, PROMPTS, temperature=0.7)
    # The same tokens scored at temperature 1 differ by far more than ATOL: the temperature really is applied.
    s = samples[0]
    at_t1 = reference.logprobs(policy.model, PROMPTS[0], s.response_token_ids, 1.0)
    assert (at_t1 - torch.tensor(s.logprobs)).abs().max() > 0.05

    # Validation sampling (val_kwargs: greedy) equals transformers' argmax decoding.
    greedy = rollout.generate(PROMPTS, expect_version=0, validation=True)
    for s in greedy:
        assert s.response_token_ids == reference.greedy(
            policy.model, PROMPTS[s.prompt_index], len(s.response_token_ids)
        )
    _assert_logprobs_match(reference, greedy, policy.model, PROMPTS, temperature=1.0)


def test_full_weight_update_moves_outputs_and_version(rollout, policy, reference):
    from serve import FullWeights

    torch.manual_seed(1)
    new_state = {
        k: v + 0.05 * torch.randn_like(v) for k, v in policy.model.state_dict().items() if k != "lm_head.weight"
    }  # tied to embed_tokens
    before = rollout.weights_checksums()

    versions = rollout.update_weights(1, FullWeights(new_state))

    assert set(versions.values()) == {1}
    assert [c["digest"] for c in rollout.weights_checksums()] != [c["digest"] for c in before]
    assert_replicas_loaded(rollout, new_state.values())  # vLLM fuses q/k/v and gate/up: the sum of sums is the same
    policy.model.load_state_dict(new_state, strict=False)
    policy.version = 1
    sampling = rollout.sampling(temperature=1.0, n=2, max_tokens=6, ignore_eos=True, seed=3)
    samples = rollout.generate(PROMPTS, expect_version=1, sampling=sampling)
    assert all(s.policy_version == 1 for s in samples)
    _assert_logprobs_match(reference, samples, policy.model, PROMPTS, temperature=1.0)


def test_lora_update_serves_base_plus_adapter(rollout, policy, reference):
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    from serve import LoraAdapter

    base = type(policy.model)(policy.model.config)
    base.load_state_dict(policy.model.state_dict())
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    torch.manual_seed(2)
    with torch.no_grad():  # peft starts B at zero (a no-op adapter); make it matter
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    peft_model.eval()
    adapter = LoraAdapter(peft_model.peft_config["default"].to_dict(), get_peft_model_state_dict(peft_model))

    versions = rollout.update_weights(2, adapter)

    assert set(versions.values()) == {2}
    greedy = rollout.generate(PROMPTS, expect_version=2, validation=True)
    assert all(s.policy_version == 2 for s in greedy)
    for s in greedy:
        assert s.response_token_ids == reference.greedy(peft_model, PROMPTS[s.prompt_index], len(s.response_token_ids))
    _assert_logprobs_match(reference, greedy, peft_model, PROMPTS, temperature=1.0)
    # Without the adapter the same tokens score differently: the adapter is really applied.
    s = greedy[0]
    plain = reference.logprobs(policy.model, PROMPTS[0], s.response_token_ids)
    assert (plain - torch.tensor(s.logprobs)).abs().max() > 0.05
    policy.model, policy.version = peft_model, 2


def test_merged_lora_update_folds_the_adapter_into_the_base_from_disk(rollout, policy, reference, vllm_tiny_model_dir):
    """A `MergedLora` sync: the replica folds the adapter into the model folder's base weights (not into what it
    served before: versions 1 and 2 changed those), and serves exactly the weights the trainer's own merge gives."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from app.engine.lora_merge import merge_lora_state_dict
    from serve import MergedLora

    base = AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    merged = merge_lora_state_dict(peft_model.state_dict(), scaling=16 / 8)
    merged.pop("lm_head.weight")  # tied: the trainer does not send it

    versions = rollout.update_weights(
        3,
        MergedLora(peft_model.peft_config["default"].to_dict(), get_peft_model_state_dict(peft_model), dtype="float32"),
    )

    assert set(versions.values()) == {3}
    assert_replicas_loaded(rollout, merged.values())  # what reached vLLM is the trainer's merge, to float64 rounding
    model = peft_model.merge_and_unload().eval()
    greedy = rollout.generate(PROMPTS, expect_version=3, validation=True)
    for s in greedy:
        assert s.response_token_ids == reference.greedy(model, PROMPTS[s.prompt_index], len(s.response_token_ids))
    _assert_logprobs_match(reference, greedy, model, PROMPTS, temperature=1.0)
    policy.model, policy.version = model, 3


def test_merged_lora_fold_rounds_the_folded_weights_to_round_to(rollout, policy, reference, vllm_tiny_model_dir):
    """`MergedLora(round_to="bfloat16")` into a float32 replica (`rollout.lora_fold_dtype`): the weights the adapter
    wraps are served on the bf16 grid, the others as the model folder holds them."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    from app.engine.lora_merge import merge_lora_state_dict
    from serve import MergedLora

    base = AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "down_proj"]))
    torch.manual_seed(5)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)  # small updates, as a run's: the bf16 grid drops some of them
    exact = merge_lora_state_dict(peft_model.state_dict(), scaling=16 / 8)
    exact.pop("lm_head.weight")  # tied: the trainer does not send it
    wrapped = {k for k in exact if k.endswith(("q_proj.weight", "down_proj.weight"))}
    rounded = {k: v.bfloat16().float() if k in wrapped else v for k, v in exact.items()}
    assert any(not torch.equal(rounded[k], exact[k]) for k in wrapped)

    adapter = get_peft_model_state_dict(peft_model)
    payload = MergedLora(peft_model.peft_config["default"].to_dict(), adapter, dtype="float32", round_to="bfloat16")
    assert set(rollout.update_weights(4, payload).values()) == {4}

    assert_replicas_loaded(rollout, rounded.values())
    model = AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32)
    model.load_state_dict(rounded, strict=False)
    model.eval()
    greedy = rollout.generate(PROMPTS, expect_version=4, validation=True)
    for s in greedy:
        assert s.response_token_ids == reference.greedy(model, PROMPTS[s.prompt_index], len(s.response_token_ids))
    _assert_logprobs_match(reference, greedy, model, PROMPTS, temperature=1.0)
    policy.model, policy.version = model, 4


def test_stale_or_future_version_is_refused(rollout, policy):
    from serve import PolicyVersionMismatch

    with pytest.raises(PolicyVersionMismatch) as stale:
        rollout.generate(PROMPTS, expect_version=policy.version - 1)
    assert stale.value.expected == policy.version - 1 and stale.value.actual == policy.version
    assert f"expected version {policy.version - 1}" in str(stale.value)
    assert f"serves version {policy.version}" in str(stale.value)
    with pytest.raises(PolicyVersionMismatch, match=f"expected version {policy.version + 5}"):
        rollout.generate(PROMPTS, expect_version=policy.version + 5)


def test_client_found_by_name_inside_a_ray_task(rollout, rollout_config, policy):
    import ray

    @ray.remote(num_cpus=0)
    def sample_remotely(app, cfg, version):  # as a Ray Train worker would: find the app by name, then sample
        from serve import get_rollout_client

        return get_rollout_client(app, cfg).generate([[1, 5, 9]], expect_version=version, validation=True)

    (sample,) = ray.get(sample_remotely.remote(APP, rollout_config, policy.version))
    assert (
        sample.policy_version == policy.version
        and 1 <= len(sample.response_token_ids) <= rollout_config.response_length
    )


def test_chat_completions_over_http_on_localhost(rollout, rollout_config, policy):
    rollout.sleep()  # colocated-placement calls are accepted (no-ops on vllm-cpu) and leave the engine usable
    rollout.wake_up()
    body = json.dumps(
        {"model": APP, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "temperature": 0}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{rollout_config.http_port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    assert answer["object"] == "chat.completion"
    assert answer["system_fingerprint"] == f"policy-v{policy.version}"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert 1 <= answer["usage"]["completion_tokens"] <= 5


def _openai_client(rollout_config):
    from openai import OpenAI

    return OpenAI(
        base_url=f"http://127.0.0.1:{rollout_config.http_port}/v1", api_key="unused", max_retries=0, timeout=120
    )


def test_openai_client_streams_the_same_greedy_answer_it_gets_whole(rollout, rollout_config, policy):
    client = _openai_client(rollout_config)
    (model,) = client.models.list().data
    messages = [{"role": "user", "content": "Count from one to ten"}]
    whole = client.chat.completions.create(model=model.id, messages=messages, max_tokens=12, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=model.id,
            messages=messages,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == whole.choices[0].message.content  # greedy: the same text either way
    assert len(pieces) > 1  # delivered as it was generated, not in one piece at the end
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason
    ]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert {c.system_fingerprint for c in chunks} == {f"policy-v{policy.version}"}

    text = client.completions.create(model=model.id, prompt="one two three", max_tokens=12, temperature=0)
    streamed = client.completions.create(
        model=model.id, prompt="one two three", max_tokens=12, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == text.choices[0].text
    assert text.object == "text_completion" and 1 <= text.usage.completion_tokens <= 12
    two = client.completions.create(model=model.id, prompt=["one", "two"], max_tokens=4, temperature=0, n=2)
    assert [c.index for c in two.choices] == [0, 1, 2, 3]
    assert two.choices[0].text == two.choices[1].text  # greedy: both samples of a prompt agree


def test_requests_the_route_cannot_serve_get_a_400_naming_the_field(rollout, rollout_config):
    from openai import BadRequestError

    client = _openai_client(rollout_config)
    for call, field in (
        (
            lambda: client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=0
            ),
            "'max_tokens'",
        ),
        (
            lambda: client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], temperature=3
            ),
            "'temperature'",
        ),
        (lambda: client.completions.create(model="m", prompt=""), "'prompt'"),
        (lambda: client.completions.create(model="m", prompt=["a", "b"], stream=True), "'prompt'"),
    ):
        with pytest.raises(BadRequestError) as err:
            call()
        assert field in str(err.value)
    request = urllib.request.Request(
        f"http://127.0.0.1:{rollout_config.http_port}/v1/chat/completions",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=60)
    assert err.value.code == 400 and "not JSON" in json.loads(err.value.read())["error"]["message"]


def _replica_scratch(replica: str):
    """The replica's scratch folder in /dev/shm, named `rayrl-rollout-<app>-<replica>-<pid of the replica>`."""
    from pathlib import Path

    (scratch,) = Path("/dev/shm").glob(f"rayrl-rollout-{APP}-{replica}-*")
    return scratch, int(scratch.name.rsplit("-", 1)[1])


def _vllm_processes() -> dict:
    """Every process vLLM started on this machine, by pid: they retitle themselves `VLLM::EngineCore`, `VLLM::Worker`
    (multiprocessing's resource tracker is not one of them), with the pids of their ancestors."""
    import psutil

    def ancestors(pid: int) -> list[int]:
        # parent pids as the kernel has them (psutil's parents() also drops a parent its clock finds younger)
        chain = []
        while pid > 1:
            pid = psutil.Process(pid).ppid()
            chain.append(pid)
        return chain

    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        if (proc.info["cmdline"] or [""])[0].startswith("VLLM::"):
            try:
                found[proc.pid] = (proc, ancestors(proc.pid))
            except psutil.NoSuchProcess:
                pass
    return found


def test_replica_runs_vllm_in_its_own_process_bound_to_its_cores(rollout):
    import psutil

    from serve.vllm_engine import cpu_bind_string, on_cpu_platform

    if not on_cpu_platform():  # a CUDA vLLM runs its engine core in a process of its own, by design
        pytest.skip("the in-process engine and its core binding are vllm-cpu's layout; this vLLM is not the CPU build")

    (replica,) = rollout.replica_versions()
    _, pid = _replica_scratch(replica)
    # scheduler and model run in the replica (serve.vllm_engine.engine_build_env): no vLLM process under it
    assert not [proc for proc, ancestors in _vllm_processes().values() if pid in ancestors]
    # the engine thread, whose OpenMP team runs the model, is bound to the replica's cores; on this 2-core machine
    # the one core rollout_config gives the only replica is a strict subset of what the replica's process may use
    expected = tuple(sorted(int(c) for c in cpu_bind_string(1, 0).split(",")))
    replica = psutil.Process(pid)
    assert len(expected) < len(replica.cpu_affinity())
    assert expected in {tuple(sorted(psutil.Process(t.id).cpu_affinity())) for t in replica.threads()}


def test_killed_replica_is_replaced_and_serves_current_policy(rollout, policy, reference, ray_cluster):
    from pathlib import Path

    import psutil
    import ray

    from serve import wait_for_replicas
    from serve.shm import RECORD

    greedy_before = rollout.generate(PROMPTS, expect_version=policy.version, validation=True)
    (victim,) = rollout.replica_versions()
    scratch, victim_pid = _replica_scratch(victim)
    # On one CPU worker vLLM runs in the replica and maps no ring buffers (serve.vllm_engine.engine_build_env);
    # with several workers it starts processes that do, and the record lists their segments.
    segments = (scratch / RECORD).read_text().split()
    assert all((Path("/dev/shm") / s).exists() for s in segments)
    (actor,) = [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"SERVE_REPLICA::{APP}#") and a["name"].endswith(victim)
    ]
    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True)

    (newcomer,) = wait_for_replicas(APP, 1, timeout_s=240, exclude=[victim])

    assert rollout.replica_versions() == {newcomer: policy.version}
    # The killed replica took the model and KV cache with it ...
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(victim_pid).wait(timeout=60)  # raises TimeoutExpired if it lives on
    # ... and could not free its scratch folder; the newcomer reaped it.
    assert not scratch.exists() and not any((Path("/dev/shm") / s).exists() for s in segments)
    greedy_after = rollout.generate(PROMPTS, expect_version=policy.version, validation=True)
    for a, b in zip(greedy_before, greedy_after):
        assert a.response_token_ids == b.response_token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=ATOL, rtol=0)
    _assert_logprobs_match(reference, greedy_after, policy.model, PROMPTS, temperature=1.0)
