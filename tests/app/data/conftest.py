import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


class DataFiles:
    """Writes small dataset files into a test's tmp_path."""

    def __init__(self, root):
        self.root = root

    @staticmethod
    def verl_rows(n, data_source="openai/gsm8k"):
        """``n`` rows in the verl schema; question i has answer i."""
        return [
            {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": f"What is {i} + 0?"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(i)},
                "extra_info": {"index": i},
            }
            for i in range(n)
        ]

    def parquet(self, name, rows):
        path = self.root / name
        pq.write_table(pa.Table.from_pylist(rows), path)
        return str(path)

    def jsonl(self, name, rows):
        path = self.root / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)


@pytest.fixture
def data_files(tmp_path):
    return DataFiles(tmp_path)
