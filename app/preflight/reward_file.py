"""custom_reward_function: the file exists, imports, and defines the named function with a signature the reward
manager can call (one sample per call, or lists with reward_model.reward_manager=batch)."""

from __future__ import annotations

import inspect
import os
import traceback

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

PER_SAMPLE_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
BATCH_ARGS = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


def check_reward_function(cfg: TrainerRunConfig) -> None:
    section = cfg.custom_reward_function
    if not section.path:
        return
    path = os.path.abspath(os.path.expanduser(section.path))
    if not os.path.isfile(path):
        what = "a folder, not a .py file" if os.path.isdir(path) else "no such file"
        raise PreflightError(f"custom_reward_function.path={section.path}: {what}")
    module = _import(path, section.path)
    fn = getattr(module, section.name, None)
    if fn is None or not callable(fn):
        import difflib

        names = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        )
        near = difflib.get_close_matches(section.name, names, n=1)
        hint = f"; did you mean {near[0]}?" if near else f"; functions there: {', '.join(names) or '(none)'}"
        raise PreflightError(
            f"custom_reward_function.name={section.name}: {path} defines no function {section.name}{hint}"
        )
    _check_signature(fn, path, section.name, cfg)


def _import(path: str, given: str):
    from algos.registry import load_module_from_file

    try:
        return load_module_from_file(path)
    except SyntaxError as exc:
        raise PreflightError(
            f"custom_reward_function.path={given}: {exc.filename or path} line {exc.lineno}: "
            f"{type(exc).__name__}: {exc.msg}"
        ) from None
    except BaseException as exc:  # the module's own code failed at import: name its line
        line = _line_in(exc, path)
        raise PreflightError(
            f"custom_reward_function.path={given}: importing {path} failed{line}: {type(exc).__name__}: {exc}"
        ) from None


def _line_in(exc: BaseException, path: str) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    return f" at line {frames[-1].lineno}" if frames else ""


def _check_signature(fn, path: str, name: str, cfg: TrainerRunConfig) -> None:
    batched = cfg.reward_model.reward_manager == "batch"
    args = BATCH_ARGS if batched else PER_SAMPLE_ARGS
    kwargs = dict(cfg.custom_reward_function.reward_kwargs)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to read, the call will tell
        return
    try:
        signature.bind(**{a: None for a in args}, **kwargs)
    except TypeError as exc:
        line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        where = f"{path} line {line}" if line else path
        how = f"{name}({', '.join(f'{a}=' for a in args)}{', **kwargs' if kwargs else ''})" + (
            " (reward_model.reward_manager=batch: one call with lists)" if batched else ""
        )
        raise PreflightError(
            f"custom_reward_function.name={name}: {name}{signature} at {where} cannot be called as "
            f"{how}: {exc}; take those keyword arguments (or **kwargs)"
        ) from None
