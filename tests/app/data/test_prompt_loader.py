"""Left-padded collation and the resumable loader."""

import torch
from support import prompt_options

from app.data import PromptDataLoader, PromptRecord, collate_prompts, load_prompt_dataset, pad_token_id_of
from app.data.dataset import PromptDataset


def _record(ids, i):
    return PromptRecord(
        prompt_ids=ids,
        messages=[{"role": "user", "content": str(i)}],
        data_source="src",
        ground_truth=str(i),
        extra_info={"i": i},
        ability=None,
        where=f"f row {i}",
    )


def test_left_padding_masks_and_positions():
    records = [_record([5, 6, 7], 0), _record([8], 1)]
    batch = collate_prompts(records, indices=[4, 9], uids=["u0", "u1"], pad_token_id=0)
    # row 1 has one real token, so two pads on the left
    assert batch.input_ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2], [0, 0, 0]]  # positions count real tokens only
    assert batch.input_ids.dtype == torch.long
    assert batch.raw_prompt_ids == [[5, 6, 7], [8]]
    assert batch.ground_truth == ["0", "1"] and batch.index == [4, 9] and batch.uid == ["u0", "u1"]
    assert set(batch.tensors()) == {"input_ids", "attention_mask", "position_ids"}
    assert "raw_prompt_ids" in batch.non_tensors() and "input_ids" not in batch.non_tensors()


def test_pad_to_fixed_width():
    batch = collate_prompts([_record([1, 2], 0)], [0], ["u"], pad_token_id=9, pad_to=4)
    assert batch.input_ids.tolist() == [[9, 9, 1, 2]]
    assert batch.position_ids.tolist() == [[0, 0, 0, 1]]


def _dataset(n):
    return PromptDataset(records=[_record([i + 1] * (1 + i % 3), i) for i in range(n)], files=["f"])


def test_loader_uids_are_unique_across_epochs():
    loader = PromptDataLoader(_dataset(6), batch_size=2, pad_token_id=0, seed=0)
    uids = [u for _ in range(2 * len(loader)) for u in loader.next_batch().uid]
    assert len(uids) == len(set(uids)) == 12
    assert uids[0] == "e0-b0-0" and uids[-1] == "e1-b2-1"


def test_loader_resume_continues_with_next_unseen_batch():
    def run(stop=None, state=None, steps=7):
        loader = PromptDataLoader(_dataset(10), batch_size=3, pad_token_id=0, seed=5)
        if state is not None:
            loader.load_state_dict(state)
        seen = []
        for _ in range(steps):
            batch = loader.next_batch()
            seen.append((batch.index, batch.uid))
            if stop is not None and len(seen) == stop:
                return seen, loader.state_dict()
        return seen, loader.state_dict()

    reference, _ = run()
    head, state = run(stop=4)  # 3 batches per epoch: stop one batch into epoch 1
    tail, _ = run(state=state, steps=3)
    assert head + tail == reference


def test_loader_on_real_prompts(data_files, smollm2_tokenizer):
    path = data_files.jsonl("d.jsonl", data_files.verl_rows(5))
    ds = load_prompt_dataset(path, smollm2_tokenizer, prompt_options())
    loader = PromptDataLoader(ds, batch_size=2, pad_token_id=pad_token_id_of(smollm2_tokenizer), shuffle=False)
    batches = list(loader)
    assert len(batches) == 2  # 5 // 2, last partial batch dropped
    batch = batches[1]
    for row, index in enumerate(batch.index):
        ids = ds[index].prompt_ids
        real = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
        assert real == ids == batch.raw_prompt_ids[row]
        assert batch.ground_truth[row] == str(index)
