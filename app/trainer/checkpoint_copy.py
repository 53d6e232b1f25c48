"""A copy of each checkpoint on another filesystem (verl's `trainer.default_hdfs_dir`): HDFS, S3, GCS or a local
folder, whatever pyarrow opens (the filesystems Ray Train writes its own checkpoints with).

verl copies each role's checkpoint folder to `<default_hdfs_dir>/global_step_<N>/<role>` after writing it locally and
refuses to resume while the key is set. Here the whole `global_step_<N>` folder (trainer state, data position, RNGs
and every engine's shards, so the copy alone resumes a run) goes to `<default_hdfs_dir>/global_step_<N>` once it is
complete locally, followed by `latest_checkpointed_iteration.txt`, so a copy that `latest...` names is whole. Runs
resume from `trainer.default_local_dir` as before; the copies are never pruned (`trainer.max_ckpt_to_keep` applies to
the local folder only), as in verl.
"""

from __future__ import annotations

from pathlib import Path

from app.trainer.checkpoints import LATEST_FILE, CheckpointError

KEY = "trainer.default_hdfs_dir"


def open_remote(uri: str):
    """(pyarrow filesystem, path inside it) for `uri`: a URI (hdfs://, s3://, gs://, file://) or a local path.
    ValueError naming the key when pyarrow cannot open it (an unknown scheme, HDFS without libhdfs)."""
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError, ImportError) as err:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise ValueError(f"{KEY}={uri!r}: pyarrow cannot open this filesystem ({err})") from None


def prepare_remote(uri: str) -> None:
    """Create the copies' folder; ValueError naming the key when it cannot be (run before any worker starts)."""
    fs, base = open_remote(uri)
    try:
        fs.create_dir(base, recursive=True)
    except OSError as err:
        raise ValueError(f"{KEY}={uri!r}: cannot create {base} there ({err})") from None


def copy_checkpoint(folder: Path, step: int, uri: str) -> str:
    """Copy the complete checkpoint `folder` (global_step_<step>) to `<uri>/global_step_<step>`, replacing an older
    copy of that step, then point `<uri>/latest_checkpointed_iteration.txt` at it; returns where it went.
    CheckpointError naming both places when the copy fails: the local checkpoint is complete either way."""
    import pyarrow.fs as pafs

    fs, base = open_remote(uri)
    base = base.rstrip("/")
    target = f"{base}/{folder.name}"
    try:
        if fs.get_file_info(target).type != pafs.FileType.NotFound:  # a step run again after a resume
            fs.delete_dir(target)
        fs.create_dir(target, recursive=True)
        pafs.copy_files(str(folder), target, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
        with fs.open_output_stream(f"{base}/{LATEST_FILE}") as out:
            out.write(str(step).encode())
    except OSError as err:
        raise CheckpointError(
            f"{KEY}: could not copy the checkpoint {folder} to {uri.rstrip('/')}/{folder.name} ({err}); the local "
            "checkpoint is complete and trainer.resume_mode=auto resumes from it"
        ) from err
    return target
