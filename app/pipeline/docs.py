"""The cards' parameter tables as Markdown, from the same `Param` tuples the parser reads.

`python -m app.pipeline.docs` rewrites the generated tables in docs/pipelines.md (between the BEGIN/END markers);
tests/app/pipeline/test_docs.py fails when the file and the code disagree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from app.pipeline.params import Param

DOC = Path(__file__).resolve().parents[2] / "docs" / "pipelines.md"


def card_table(params: tuple[Param, ...]) -> str:
    """One Markdown table: section, parameter, default, type, where it goes."""
    rows = ["| section | parameter | default | type | maps onto |", "|---|---|---|---|---|"]
    for p in params:
        kind = f"one of {', '.join(map(str, p.choices))}" if p.choices else p.kind
        cell = p.where().replace("|", "\\|")
        rows.append(f"| {p.section} | `{p.name}` | `{p.default_text()}` | {kind} | {cell} |")
    return "\n".join(rows)


def marker(card: str) -> tuple[str, str]:
    return f"<!-- BEGIN {card} table (python -m app.pipeline.docs) -->", f"<!-- END {card} table -->"


def render(text: str) -> str:
    """`text` with every card's table block replaced by the table the code declares."""
    from app.pipeline.runner import cards

    for card, module in cards().items():
        begin, end = marker(card)
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise ValueError(f"{DOC}: no {begin} ... {end} block")
        text = pattern.sub(lambda _: f"{begin}\n{card_table(module.PARAMS)}\n{end}", text)
    return text


def main() -> int:
    DOC.write_text(render(DOC.read_text()))
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
