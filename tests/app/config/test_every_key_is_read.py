"""Every key of the typed schema is read by the code, or is one verl_compat documents as having no effect here, or
is accepted only at verl's default (DEFAULT_ONLY); a key nothing reads would silently ignore
what a user sets.

"Read" is checked in the source text: the key's name as an attribute (`.name`) or a string (`"name"`) somewhere in
app/, serve/ or algos/ outside the schema itself. A name shared by several sections counts for all of them, so this
catches keys whose name appears nowhere (the ones that slip in when a verl key is added to the schema alone).
"""

import dataclasses
import re
import typing
from pathlib import Path

from app.config.schema import TrainerRunConfig
from app.config.verl_compat import DEFAULT_ONLY, NO_EFFECT

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "app" / "config" / "schema.py"


def leaf_keys(cls: type, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from leaf_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def unread_keys(cls: type, source: str) -> list[str]:
    """Keys of `cls` whose name `source` never uses as an attribute or a string."""

    def read(key: str) -> bool:
        name = re.escape(key.rsplit(".", 1)[-1])
        return re.search(rf"\.{name}\b|[\"']{name}[\"']", source) is not None

    return [k for k in leaf_keys(cls) if not read(k)]


def test_every_schema_key_is_read_or_documented_as_without_effect():
    source = "\n".join(
        p.read_text() for d in ("app", "serve", "algos") for p in (ROOT / d).rglob("*.py") if p != SCHEMA
    )
    assert len(list(leaf_keys(TrainerRunConfig))) > 200  # the walk reached the nested sections
    unread = [k for k in unread_keys(TrainerRunConfig, source) if k not in NO_EFFECT and k not in DEFAULT_ONLY]
    assert unread == []
    assert set(NO_EFFECT) | set(DEFAULT_ONLY) <= set(leaf_keys(TrainerRunConfig))  # the lists name real keys


def test_a_key_is_reported_until_something_reads_it():
    @dataclasses.dataclass
    class Inner:
        depth_limit: int = 0

    @dataclasses.dataclass
    class Section:
        inner: Inner = dataclasses.field(default_factory=Inner)
        retries: int = 0

    assert unread_keys(Section, "x = cfg.retries\n") == ["inner.depth_limit"]
    assert unread_keys(Section, "x = cfg.retries + cfg.inner.depth_limit_total\n") == ["inner.depth_limit"]
    assert unread_keys(Section, 'getattr(cfg, "depth_limit"); cfg.retries') == []
