"""A pipeline card's flat parameter table and the parsing of `key=value` text against it.

Each card (app/pipeline/verl_finetune.py, app/pipeline/grpo_chat_completion.py) declares ONE tuple of `Param`s: name,
card default, type, and where the value goes (a trainer-config key, a note for a mapping done in code, or the reason
it cannot apply here). The parser, the dry run and the docs tables (app/pipeline/docs.py) all read that tuple.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

REQUIRED = object()  # the card has no default: the user must give a value
KINDS = ("str", "int", "float", "bool", "path", "choice")
_TRUE, _FALSE = ("true", "1", "yes", "y", "on"), ("false", "0", "no", "n", "off")


class PipelineError(ValueError):
    """A pipeline parameter is wrong; the message names the parameter, the value and why."""


@dataclass(frozen=True)
class Param:
    """One row of a card's table.

    Exactly one of `target` (the trainer-config key the value lands on unchanged), `mapping` (what code does with it,
    for keys whose translation is more than a copy) or `na` (why the parameter cannot apply here) is set. A name
    ending in `*` is a prefix: every key starting with it is accepted (infrastructure keys such as instance_type_*).
    """

    name: str
    default: Any
    kind: str = "str"
    section: str = ""
    target: Optional[str] = None
    mapping: Optional[str] = None
    na: Optional[str] = None
    choices: tuple = ()
    optional: bool = False  # None (not given) is a valid value

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.target, self.mapping, self.na)) != 1:
            raise TypeError(f"parameter {self.name}: set exactly one of target, mapping, na")
        if self.kind not in KINDS:
            raise TypeError(f"parameter {self.name}: kind {self.kind!r} is not one of {KINDS}")

    @property
    def is_prefix(self) -> bool:
        return self.name.endswith("*")

    def matches(self, key: str) -> bool:
        return key.startswith(self.name[:-1]) if self.is_prefix else key == self.name

    def where(self) -> str:
        """The table's "maps onto" cell."""
        if self.target is not None:
            return f"`{self.target}`"
        if self.na is not None:
            return f"not applicable: {self.na}"
        return self.mapping

    def default_text(self) -> str:
        if self.default is REQUIRED:
            return "required"
        if self.default is None:
            return "(none)"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return str(self.default)

    def coerce(self, value: Any) -> Any:
        """The typed value of a string from the command line or a value from a YAML/JSON file."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
            if self.optional or self.default is None or self.kind in ("str", "path"):
                return None
            raise PipelineError(f"{self.name}: a value is required ({self.kind})")
        expected = {"bool": "true or false", "int": "an integer", "float": "a number"}
        try:
            if self.kind == "bool":
                text = str(value).strip().lower()  # the card writes some booleans as strings: apply_lora "true"
                if text not in _TRUE + _FALSE:
                    raise ValueError
                return text in _TRUE
            if self.kind in ("int", "float"):
                if isinstance(value, bool):
                    raise ValueError
                number = float(value)
                if self.kind == "float":
                    return number
                if number != int(number):
                    raise ValueError
                return int(number)
        except (TypeError, ValueError):
            raise PipelineError(f"{self.name}={value!r}: expected {expected[self.kind]}") from None
        text = str(value)
        if self.kind == "choice" and text not in self.choices:
            raise PipelineError(f"{self.name}={text!r}: choose one of {', '.join(map(str, self.choices))}")
        return text


@dataclass
class Values:
    """The parsed parameters: every table row at its given or default value, which were given, and the
    trainer-config keys given directly as dotted `section.key=value` overrides."""

    values: dict[str, Any]
    given: set[str]
    extra_keys: dict[str, Any]  # prefix rows (instance_type_*, ...) and their values, by full key
    trainer_overrides: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


def param_rows(section: str, *rows: tuple) -> tuple[Param, ...]:
    """A card table's section from compact rows (name, default, kind, where[, extras]): `where` is a trainer-config
    key, "code: <what the card's code does with it>", or "n/a: <why it cannot apply here>"."""
    out = []
    for row in rows:
        name, default, kind, where = row[:4]
        extra = row[4] if len(row) > 4 else {}
        kind_key = "na" if where.startswith("n/a: ") else "mapping" if where.startswith("code: ") else "target"
        value = where.split(": ", 1)[1] if kind_key != "target" else where
        out.append(Param(name, default, kind, section, **{kind_key: value}, **extra))
    return tuple(out)


def find_param(table: Iterable[Param], key: str) -> Optional[Param]:
    exact = [p for p in table if not p.is_prefix and p.name == key]
    return exact[0] if exact else next((p for p in table if p.is_prefix and p.matches(key)), None)


def nearest_key(table: Iterable[Param], key: str) -> Optional[str]:
    names = [p.name for p in table if not p.is_prefix]
    near = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if not near:  # a different case or separator: data.train_files for data_train_files
        folded = {n.lower().replace("-", "_"): n for n in names}
        near = [folded[k] for k in [key.lower().replace("-", "_").replace(".", "_")] if k in folded]
    return near[0] if near else None


def parse_values(table: tuple[Param, ...], raw: dict[str, Any], card: str) -> Values:
    """Check every key against the table (unknown ones are errors naming the nearest valid key), coerce the values,
    fill the defaults and demand the required ones. Keys with a dot are trainer-config overrides, checked later by
    the config schema."""
    values, given, extra, overrides = {}, set(), {}, {}
    unknown = []
    for key, value in raw.items():
        if "." in key:
            overrides[key] = value
            continue
        param = find_param(table, key)
        if param is None:
            unknown.append(key)
        elif param.is_prefix:
            extra[key] = value
        else:
            values[key] = param.coerce(value)
            given.add(key)
    if unknown:
        hints = []
        for key in unknown:
            near = nearest_key(table, key)
            hints.append(f"{key!r}" + (f" (did you mean {near!r}?)" if near else ""))
        raise PipelineError(
            f"unknown parameter{'s' if len(unknown) > 1 else ''} of {card}: {', '.join(hints)}; "
            f"`python -m app.pipeline {card} --list` shows the card's parameters"
        )
    for param in table:
        if param.is_prefix or param.name in values:
            continue
        if param.default is REQUIRED:
            raise PipelineError(f"{card}: parameter {param.name} is required ({param.section})")
        values[param.name] = param.default
    return Values(values, given, extra, overrides)


def parse_cli_pairs(pairs: list[str]) -> dict[str, Any]:
    """`key=value` strings; the value stays text (the table's type coerces it) except YAML-looking lists."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PipelineError(f"{pair!r} is not key=value")
        if key in out:
            raise PipelineError(f"parameter {key} is given twice")
        out[key.strip()] = value
    return out


def read_params_file(path: str) -> dict[str, Any]:
    """A flat mapping of parameters from a .yaml/.yml or .json file."""
    file = Path(path)
    if not file.is_file():
        raise PipelineError(f"--params {path}: no such file")
    text = file.read_text()
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # a syntax error: name the file
        raise PipelineError(f"--params {path}: cannot parse it: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PipelineError(f"--params {path}: expected a flat mapping of parameter: value, got {type(data).__name__}")
    nested = [k for k, v in data.items() if isinstance(v, dict)]
    if nested:
        raise PipelineError(f"--params {path}: parameters are flat keys; {', '.join(map(str, nested))} holds a mapping")
    return {str(k): v for k, v in data.items()}
