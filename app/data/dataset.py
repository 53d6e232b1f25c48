"""Loading files into a list of tokenized prompts with everything the reward needs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from app.data.errors import DataError
from app.data.fields import get_dotted, has_root, to_messages, with_system_prompt
from app.data.options import PromptDataOptions
from app.data.prompts import render_prompts, tokenize_prompts, truncate_ids
from app.data.sources import TableSource, as_file_list, check_files_exist, read_table

logger = logging.getLogger(__name__)


@dataclass
class PromptRecord:
    """One prompt, templated and tokenized."""

    prompt_ids: list[int]  # templated prompt with generation prompt, no padding, after truncation
    messages: list[dict[str, str]]  # chat messages the ids were made from (system prompt included)
    data_source: str
    ground_truth: Any
    extra_info: dict[str, Any]
    ability: str | None
    where: str  # "file row i" / "file line n", for messages about this prompt


@dataclass
class PromptDataset:
    """Prompts from one or more files, in file order. ``num_filtered`` counts prompts dropped as too long."""

    records: list[PromptRecord]
    files: list[str]
    num_filtered: int = 0
    filtered: list[str] = field(default_factory=list, repr=False)  # where + length of each dropped prompt

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> PromptRecord:
        return self.records[index]

    def __iter__(self) -> Iterator[PromptRecord]:
        return iter(self.records)


def check_data_files(files: str | Sequence[str], options: PromptDataOptions) -> int:
    """What can be checked without a tokenizer: every file exists, reads, and has the columns `options` name. Returns
    the number of rows. A missing file or column fails here in a second, before transformers is even imported."""
    paths = as_file_list(files)
    check_files_exist(paths)
    rows = 0
    for path in paths:
        source = read_table(path)
        _check_columns(source, options)
        rows += len(source.rows)
    return rows


def _check_columns(source: TableSource, options: PromptDataOptions) -> None:
    if not source.rows:
        return
    required = [("data.prompt_key", options.prompt_key)]
    if options.ground_truth_key:
        required.append(("data.ground_truth_key", options.ground_truth_key))
    if options.default_data_source is None:
        required.append(("data.reward_fn_key", options.reward_fn_key))
    for setting, key in required:
        if not has_root(source.columns, key):
            raise DataError(
                f"{source.path}: no column {key!r} ({setting}); "
                f"columns present: {', '.join(source.columns) or '(none)'}"
            )


def _row_field(source: TableSource, i: int, key: str, setting: str) -> Any:
    try:
        return get_dotted(source.rows[i], key)
    except KeyError as err:
        raise DataError(
            f"{source.where(i)}: no {key!r} ({setting}); missing part {err.args[0]!r}, "
            f"row keys: {', '.join(source.rows[i].keys())}"
        ) from None


def load_prompt_dataset(
    files: str | Sequence[str],
    tokenizer: Any,
    options: PromptDataOptions,
    max_samples: int | None = None,
) -> PromptDataset:
    """Read, validate, template and tokenize every row of ``files``; raise DataError on any bad input.

    Args:
        files: one path or a list; each a ``.parquet``, ``.jsonl``/``.json`` file or a ``save_to_disk`` folder.
        tokenizer: a Hugging Face tokenizer with a chat template.
        options: keys and length handling (``PromptDataOptions.from_mapping(cfg.data)``).
        max_samples: keep only the first rows, in file order (data.train_max_samples / val_max_samples).
    """
    paths = as_file_list(files)
    check_files_exist(paths)  # before reading any, so a typo in the last file fails fast
    sources = [read_table(p) for p in paths]

    pending: list[tuple[TableSource, int, list[dict[str, str]]]] = []
    for source in sources:
        _check_columns(source, options)
        for i in range(len(source.rows)):
            if max_samples is not None and len(pending) >= max_samples:
                break
            value = _row_field(source, i, options.prompt_key, "data.prompt_key")
            messages = to_messages(value, source.where(i), options.prompt_key)
            messages = with_system_prompt(messages, options.system_prompt)
            pending.append((source, i, messages))
    if not pending:
        raise DataError(f"dataset is empty: no rows in {', '.join(paths)}")

    texts = render_prompts(tokenizer, [m for _, _, m in pending], options.apply_chat_template_kwargs)
    ids_per_row = tokenize_prompts(tokenizer, texts)

    records: list[PromptRecord] = []
    filtered: list[str] = []
    limit = options.max_prompt_length
    for (source, i, messages), ids in zip(pending, ids_per_row):
        where = source.where(i)
        if len(ids) > limit:
            if options.filter_overlong_prompts:
                filtered.append(f"{where} ({len(ids)} tokens)")
                continue
            if options.truncation == "error":
                raise DataError(
                    f"{where}: prompt is {len(ids)} tokens, longer than data.max_prompt_length={limit}; "
                    "raise it, set data.filter_overlong_prompts=true or data.truncation=left|right|middle"
                )
            ids = truncate_ids(ids, limit, options.truncation)
        row = source.rows[i]
        if options.reward_fn_key in row or options.default_data_source is None:
            data_source = _row_field(source, i, options.reward_fn_key, "data.reward_fn_key")
        else:
            data_source = options.default_data_source
        ground_truth = None
        if options.ground_truth_key:
            ground_truth = _row_field(source, i, options.ground_truth_key, "data.ground_truth_key")
        extra_info = row.get(options.extra_info_key)
        records.append(
            PromptRecord(
                prompt_ids=ids,
                messages=messages,
                data_source=str(data_source),
                ground_truth=ground_truth,
                extra_info=dict(extra_info) if isinstance(extra_info, dict) else {},
                ability=row.get("ability"),
                where=where,
            )
        )
    if filtered:
        logger.warning(
            "dropped %d of %d prompts longer than max_prompt_length=%d (first: %s)",
            len(filtered),
            len(pending),
            limit,
            filtered[0],
        )
    if not records:
        raise DataError(
            f"all {len(pending)} prompts in {', '.join(paths)} are longer than data.max_prompt_length={limit} "
            "and were filtered out"
        )
    return PromptDataset(records=records, files=paths, num_filtered=len(filtered), filtered=filtered)
