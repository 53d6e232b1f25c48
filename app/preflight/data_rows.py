"""The data files read, templated and tokenized as the workers will read them (app.trainer.setup.check_data): a
missing file or column, or a bad row, names the file and row (a DataError). In the pre-flight's child process, where
the tokenizer check has loaded transformers already."""

from __future__ import annotations

from app.config.schema import TrainerRunConfig


def check_data_rows(cfg: TrainerRunConfig) -> tuple[int, int]:
    """(training prompts, validation prompts)."""
    from app.trainer.setup import check_data

    return check_data(cfg)
