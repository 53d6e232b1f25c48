"""The data files exist, read, and hold the columns the data.* keys name: checked on the driver without a tokenizer,
so that a misspelt column or path fails in about a second (the full read, templated and tokenized, follows in the
data check)."""

from __future__ import annotations

from app.config.schema import TrainerRunConfig


def check_data_files(cfg: TrainerRunConfig) -> tuple[int, int]:
    """(training rows, validation rows) as the files hold them; raises the DataError naming the file and column."""
    from app.data import PromptDataOptions
    from app.data import check_data_files as check_files

    options = PromptDataOptions.from_mapping(cfg.data)
    train = check_files(cfg.data.train_files, options)
    return train, check_files(cfg.data.val_files, options) if cfg.data.val_files else 0
