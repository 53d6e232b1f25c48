"""Reading dataset files into rows: parquet, JSONL (or a JSON array) and ``datasets`` ``save_to_disk`` folders."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from app.data.errors import DataError

PARQUET_SUFFIXES = (".parquet", ".pq")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


@dataclass
class TableSource:
    """All rows of one file, with what is needed to point at a row in an error message."""

    path: str
    columns: list[str]
    rows: list[dict[str, Any]]
    # JSONL only: 1-based line number of each row (blank lines are skipped, so rows and lines differ).
    line_numbers: list[int] | None = field(default=None, repr=False)

    def where(self, row: int) -> str:
        """``"data.jsonl line 7"`` or ``"data.parquet row 6"`` (rows count from 0)."""
        if self.line_numbers is not None:
            return f"{self.path} line {self.line_numbers[row]}"
        return f"{self.path} row {row}"


def as_file_list(files: str | os.PathLike | Sequence[str | os.PathLike] | None) -> list[str]:
    """One path or a list of paths (a Hydra ListConfig works too) -> list of str; empty is an error."""
    if files is None:
        raise DataError("no data files given (data.train_files / data.val_files is empty)")
    if isinstance(files, (str, os.PathLike)):
        paths = [os.fspath(files)]
    else:
        paths = [os.fspath(f) for f in files]
    if not paths:
        raise DataError("no data files given (data.train_files / data.val_files is an empty list)")
    return paths


def check_files_exist(paths: Sequence[str]) -> None:
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise DataError(f"data file not found: {', '.join(missing)}")


def read_table(path: str) -> TableSource:
    """Read one parquet file, JSONL/JSON file or ``save_to_disk`` folder."""
    if not os.path.exists(path):
        raise DataError(f"data file not found: {path}")
    if os.path.isdir(path):
        return _read_hf_folder(path)
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return _read_parquet(path)
    if lower.endswith(JSON_SUFFIXES):
        return _read_json_lines(path)
    raise DataError(
        f"unsupported data file {path}: expected {'/'.join(PARQUET_SUFFIXES + JSON_SUFFIXES)} "
        "or a folder written by datasets' save_to_disk"
    )


def _read_parquet(path: str) -> TableSource:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"cannot read parquet file {path}: {err}") from err
    return TableSource(path=path, columns=list(table.column_names), rows=table.to_pylist())


def _read_json_lines(path: str) -> TableSource:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path}: {err}") from err
    if text.lstrip().startswith("["):  # a JSON array of objects rather than one object per line
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"malformed JSON in {path} line {err.lineno}: {err.msg}") from err
        lines = None
    else:
        items, lines = [], []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DataError(f"malformed JSON in {path} line {lineno}: {err.msg} (column {err.colno})") from err
            lines.append(lineno)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"line {lines[i]}" if lines is not None else f"item {i}"
            raise DataError(f"{path} {where}: expected a JSON object, got {type(item).__name__}")
    columns = list(items[0].keys()) if items else []
    return TableSource(path=path, columns=columns, rows=items, line_numbers=lines)


def _read_hf_folder(path: str) -> TableSource:
    markers = ("dataset_info.json", "state.json", "dataset_dict.json")
    if not any(os.path.exists(os.path.join(path, m)) for m in markers):
        raise DataError(f"{path} is a folder but not one written by datasets' save_to_disk (no {' / '.join(markers)})")
    import datasets  # lazy: heavy import, only needed for this format

    try:
        loaded = datasets.load_from_disk(path)
    except Exception as err:  # datasets raises many types; all mean the folder is unusable
        raise DataError(f"cannot load datasets folder {path}: {err}") from err
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded.keys())
        if len(splits) != 1:
            raise DataError(
                f"{path} holds several splits ({', '.join(splits)}); point at one split's folder, "
                f"e.g. {os.path.join(path, splits[0])}"
            )
        loaded = loaded[splits[0]]
    return TableSource(path=path, columns=list(loaded.column_names), rows=loaded.to_list())
