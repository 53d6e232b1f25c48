"""The data-files check: paths and columns on the driver, without a tokenizer, before the full read in the child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.config import load_config
from app.preflight import CHECKS
from app.preflight.data_files import check_data_files

REPO = Path(__file__).resolve().parents[3]


def _cfg(train, val, **data):
    return load_config(
        {
            "actor_rollout_ref": {"model": {"path": "/unused"}, "actor": {"ppo_mini_batch_size": 2}},
            "data": {"train_files": str(train), "val_files": str(val), "train_batch_size": 2, **data},
        }
    )


def test_rows_are_counted_in_every_file(small_arith_data):
    cfg = _cfg(small_arith_data / "train.parquet", small_arith_data / "test.parquet")
    assert check_data_files(cfg) == (8, 2)  # the fixture's 8 training and 2 test problems


def test_a_missing_column_or_file_names_the_file_and_the_key(small_arith_data, tmp_path):
    from app.data import DataError

    with pytest.raises(
        DataError,
        match=r"train\.parquet: no column 'question' \(data\.prompt_key\); columns present: "
        r"data_source, prompt",
    ):
        check_data_files(
            _cfg(small_arith_data / "train.parquet", small_arith_data / "test.parquet", prompt_key="question")
        )
    with pytest.raises(DataError, match=r"data file not found: .*val\.parquet"):
        check_data_files(_cfg(small_arith_data / "train.parquet", tmp_path / "val.parquet"))


def test_it_runs_on_the_driver_before_the_tokenizer_and_loads_no_transformers(small_arith_data):
    names = [c.name for c in CHECKS]
    assert names.index("data_files") < names.index("tokenizer") and not CHECKS[names.index("data_files")].apart
    code = (
        "import sys\n"
        "from app.config import load_config\n"
        "from app.data import DataError\n"
        "from app.preflight.data_files import check_data_files\n"
        "cfg = load_config({'actor_rollout_ref': {'model': {'path': '/unused'},\n"
        "                                         'actor': {'ppo_mini_batch_size': 2}},\n"
        "                   'data': {'train_files': sys.argv[1], 'val_files': '', 'train_batch_size': 2,\n"
        "                            'prompt_key': 'question'}})\n"
        "try:\n"
        "    check_data_files(cfg)\n"
        "except DataError:\n"
        "    print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(small_arith_data / "train.parquet")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
