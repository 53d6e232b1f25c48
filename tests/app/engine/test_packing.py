import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification

from app.batch import TensorBatch
from app.engine import forward
from app.engine.forward import response_outputs
from app.engine.packed_attention import register_packed_attention
from app.engine.packing import pack_inputs, trim_padding


def test_pack_inputs_indices_by_hand():
    # two rows, P=3, R=2. row 0: prompt [a b c] + response [d e]; row 1: pad + prompt [f g] + response [h] + pad
    ids = torch.tensor([[11, 12, 13, 14, 15], [0, 16, 17, 18, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]])
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    p = pack_inputs(ids, mask, pos, response_len=2)
    assert p.input_ids.tolist() == [[11, 12, 13, 14, 15, 16, 17, 18]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
    assert p.cu_seqlens.tolist() == [0, 5, 8]
    # d is predicted at c (packed 2), e at d (3), h at g (6)
    assert p.output_index.tolist() == [2, 3, 6]
    assert p.labels.tolist() == [14, 15, 18]
    assert p.scatter(torch.tensor([1.0, 2.0, 3.0])).tolist() == [[1.0, 2.0], [3.0, 0.0]]


def test_pack_inputs_rounds_the_row_and_the_kept_outputs_up_to_a_multiple_by_hand():
    # the rows above: 8 packed tokens and 3 kept outputs, rounded to multiples of 5 -> 10 tokens and 5 outputs
    ids = torch.tensor([[11, 12, 13, 14, 15], [0, 16, 17, 18, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]])
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    p = pack_inputs(ids, mask, pos, response_len=2, length_multiple=5, outputs_multiple=5)
    # a filler sequence of 2 tokens of its own (positions from 0, a boundary before it) ends the row
    assert p.input_ids.tolist() == [[11, 12, 13, 14, 15, 16, 17, 18, 18, 18]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 0, 1]]
    assert p.cu_seqlens.tolist() == [0, 5, 8, 10]
    assert p.max_seqlen == 5
    # the last kept output repeated twice; scatter keeps the first 3 values and drops the repeats' 9s
    assert p.output_index.tolist() == [2, 3, 6, 6, 6]
    assert p.labels.tolist() == [14, 15, 18, 18, 18]
    assert p.scatter(torch.tensor([1.0, 2.0, 3.0, 9.0, 9.0])).tolist() == [[1.0, 2.0], [3.0, 0.0]]
    # each rounding on its own: the row to 4 (already 8: no filler) and the outputs to 2; the row alone to 3
    p = pack_inputs(ids, mask, pos, response_len=2, length_multiple=4, outputs_multiple=2)
    assert (p.input_ids.shape, p.output_index.tolist()) == ((1, 8), [2, 3, 6, 6])
    p = pack_inputs(ids, mask, pos, response_len=2, length_multiple=3)
    assert (p.cu_seqlens.tolist(), p.output_index.tolist()) == ([0, 5, 8, 9], [2, 3, 6])
    with pytest.raises(ValueError, match="outputs_multiple must be at least 1, got 0"):
        pack_inputs(ids, mask, pos, response_len=2, outputs_multiple=0)


def test_shared_prompt_packing_rounds_with_a_prompt_of_no_responses():
    # the shared rows below: 8 packed tokens, 5 kept outputs; to multiples of 3 -> 9 tokens, 6 outputs
    ids = torch.tensor([[11, 12, 21, 22], [0, 13, 23, 0], [11, 12, 24, 25]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1]])
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    p = pack_inputs(ids, mask, pos, response_len=2, share_prompts=True, length_multiple=3, outputs_multiple=3)
    assert p.input_ids.tolist() == [[11, 12, 21, 22, 24, 25, 13, 23, 23]]
    assert p.prompt_layout == ((2, (2, 2)), (1, (1,)), (1, ()))
    assert p.cu_seqlens.tolist() == [0, 2, 4, 6, 7, 8, 9]
    assert p.output_index.tolist() == [1, 2, 6, 1, 4, 4]
    assert p.labels.tolist() == [21, 22, 23, 24, 25, 25]


def test_trim_padding_drops_all_padding_columns():
    ids = torch.tensor([[0, 0, 5, 6, 7, 0, 0], [0, 4, 5, 6, 0, 0, 0]])
    mask = (ids != 0).long()
    t = trim_padding(ids, mask, (mask.cumsum(1) - 1).clamp(min=0), response_len=3)
    # column 0 is padding in both rows; response columns 1 and 2 are padding in both rows
    assert t.input_ids.tolist() == [[0, 5, 6, 7], [4, 5, 6, 0]]
    assert t.kept_response_len == 1
    assert t.pad_response(torch.ones(2, 1)).tolist() == [[1, 0, 0], [1, 0, 0]]


def test_packed_attention_matches_each_sequence_alone():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(config).eval()
    model.config._attn_implementation = register_packed_attention()
    seqs = [torch.randint(0, 128, (n,)) for n in (5, 3, 7)]
    packed = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(len(s)) for s in seqs])[None]
    cu = torch.tensor([0, 5, 8, 15], dtype=torch.int32)
    with torch.no_grad():
        got = model(input_ids=packed, position_ids=pos, cu_seq_lens_q=cu).logits[0]
        alone = torch.cat([model(input_ids=s[None]).logits[0] for s in seqs])
        # without cu_seq_lens the boundaries come from the restarting position ids
        derived = model(input_ids=packed, position_ids=pos).logits[0]
        # attending across the packed row (plain causal) would differ: the test can tell the two apart
        model.config._attn_implementation = "sdpa"
        leaky = model(input_ids=packed, position_ids=torch.arange(15)[None]).logits[0]
    torch.testing.assert_close(got, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(derived, alone, rtol=1e-5, atol=1e-5)
    assert (leaky[5:] - alone[5:]).abs().max() > 1e-3


def test_pack_inputs_shares_a_prompt_between_its_rows_by_hand():
    # rows 0 and 2 share prompt [a b]; row 1 has prompt [c] (left-padded). P=2, R=2.
    ids = torch.tensor([[11, 12, 21, 22], [0, 13, 23, 0], [11, 12, 24, 25]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1]])
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    p = pack_inputs(ids, mask, pos, response_len=2, share_prompts=True)
    # one copy of [a b], then row 0's and row 2's responses; then [c] and row 1's response
    assert p.input_ids.tolist() == [[11, 12, 21, 22, 24, 25, 13, 23]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 2, 3, 0, 1]]
    assert p.prompt_layout == ((2, (2, 2)), (1, (1,)))
    assert p.cu_seqlens.tolist() == [0, 2, 4, 6, 7, 8]
    # rows 0 and 2 both predict their first token at the shared b (packed 1); row 1 its only token at c (6)
    assert list(zip(p.rows.tolist(), p.output_index.tolist())) == [(0, 1), (0, 2), (1, 6), (2, 1), (2, 4)]
    assert p.labels.tolist() == [21, 22, 23, 24, 25]


def _grouped_rows(prompt_len=6, response_len=5, seed=0):
    """Two prompts x three samples, rows of the two groups interleaved (grouping must not need adjacent rows),
    responses of different lengths and one sample of length 1."""
    g = torch.Generator().manual_seed(seed)
    prompts = [
        (torch.tensor([0, 0, 5, 6, 7, 8]), torch.tensor([0, 0, 1, 1, 1, 1])),
        (torch.tensor([0, 9, 10, 11, 12, 13]), torch.tensor([0, 1, 1, 1, 1, 1])),
    ]
    rows, masks = [], []
    for length in (5, 2, 1):
        for prompt, prompt_mask in prompts:
            response_mask = (torch.arange(response_len) < length).long()
            rows.append(torch.cat([prompt, torch.randint(1, 128, (response_len,), generator=g) * response_mask]))
            masks.append(torch.cat([prompt_mask, response_mask]))
    ids, mask = torch.stack(rows), torch.stack(masks)
    return ids, mask, prompt_len


def _tiny_llama(model_cls=LlamaForCausalLM, **extra):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **extra,
    )
    model = model_cls(config).double().eval()  # eval: no classifier dropout; gradients still flow
    model.config._attn_implementation = register_packed_attention()
    return model


def _outputs_and_grads(model, batch, model_kind, **kwargs):
    model.zero_grad()
    out = response_outputs(model, batch, model_kind=model_kind, **kwargs)
    loss = sum((v * torch.linspace(0.5, 1.5, v.numel(), dtype=v.dtype).view_as(v)).sum() for v in out.values())
    loss.backward()
    return {k: v.detach() for k, v in out.items()}, [p.grad.clone() for p in model.parameters()]


def test_shared_prompt_packing_gives_the_outputs_and_gradients_of_padded_rows():
    # Each response must see its prompt exactly as if it had its own copy, and nothing of its siblings: the log-probs,
    # entropies and every parameter gradient equal those of the padded batch. The outputs are float32 (computed in
    # float64 here), so they agree to float32 rounding; a response missing its prompt, or seeing a sibling, is off by
    # O(1).
    model = _tiny_llama()
    ids, mask, prompt_len = _grouped_rows()
    batch = TensorBatch({"input_ids": ids, "attention_mask": mask, "responses": ids[:, prompt_len:]})
    kwargs = dict(compute_entropy=True, entropy_requires_grad=True)
    padded, padded_grads = _outputs_and_grads(model, batch, "causal_lm", remove_padding=False, **kwargs)
    shared, shared_grads = _outputs_and_grads(
        model, batch, "causal_lm", remove_padding=True, share_prompts=True, **kwargs
    )
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(shared[key], padded[key], rtol=1e-6, atol=1e-6)
    for got, want in zip(shared_grads, padded_grads):
        assert float((got - want).abs().max() / want.abs().max()) < 1e-6


def test_shared_prompt_packing_for_a_value_model():
    model = _tiny_llama(LlamaForTokenClassification, num_labels=1)
    ids, mask, prompt_len = _grouped_rows(seed=1)
    batch = TensorBatch({"input_ids": ids, "attention_mask": mask, "responses": ids[:, prompt_len:]})
    padded, padded_grads = _outputs_and_grads(model, batch, "value", remove_padding=False)
    shared, shared_grads = _outputs_and_grads(model, batch, "value", remove_padding=True, share_prompts=True)
    torch.testing.assert_close(shared["values"], padded["values"], rtol=1e-6, atol=1e-6)
    for got, want in zip(shared_grads, padded_grads):
        assert float((got - want).abs().max() / want.abs().max()) < 1e-6


def test_shared_prompt_packing_needs_a_prompt_token():
    ids = torch.tensor([[0, 21, 22]])
    mask = torch.tensor([[0, 1, 1]])
    with pytest.raises(ValueError, match="row 0 has no prompt token"):
        pack_inputs(ids, mask, (mask.cumsum(1) - 1).clamp(min=0), response_len=2, share_prompts=True)


@pytest.mark.parametrize("share_prompts", [False, True])
def test_rounded_packing_gives_the_outputs_and_gradients_of_exact_packing(monkeypatch, share_prompts):
    # The filler sequence must not reach a real token, and the repeated outputs must not add to the loss: the
    # log-probs, entropies and every gradient equal those of packing without rounding. Computed in float64, so a
    # repeat counted twice (its gradient doubled) or a filler attended to is off by far more than the tolerance.
    model = _tiny_llama()
    ids, mask, prompt_len = _grouped_rows(seed=2)
    batch = TensorBatch({"input_ids": ids, "attention_mask": mask, "responses": ids[:, prompt_len:]})
    kwargs = dict(remove_padding=True, share_prompts=share_prompts, compute_entropy=True, entropy_requires_grad=True)
    packed_lengths = []

    def recording(*args, **kw):
        p = pack_inputs(*args, **kw)
        packed_lengths.append((p.input_ids.shape[1], len(p.output_index)))
        return p

    monkeypatch.setattr(forward, "pack_inputs", recording)
    rounded, rounded_grads = _outputs_and_grads(model, batch, "causal_lm", **kwargs)
    monkeypatch.setattr(forward, "PACKED_MULTIPLE", 1)
    exact, exact_grads = _outputs_and_grads(model, batch, "causal_lm", **kwargs)
    # the forward rounds (to 32: 64 tokens, 32 outputs here), and the exact packing does not
    (rounded_len, rounded_outputs), (exact_len, exact_outputs) = packed_lengths
    assert (rounded_len % 32, rounded_outputs % 32) == (0, 0)
    assert rounded_len > exact_len and rounded_outputs > exact_outputs
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(rounded[key], exact[key], rtol=1e-12, atol=1e-12)
    for got, want in zip(rounded_grads, exact_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
