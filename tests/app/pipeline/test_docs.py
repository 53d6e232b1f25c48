"""docs/pipelines.md shows each card's parameter table exactly as the code declares it."""

from __future__ import annotations

from app.pipeline.docs import DOC, marker, render
from app.pipeline.runner import cards


def test_docs_tables_match_the_code_tables():
    text = DOC.read_text()
    assert render(text) == text, "docs/pipelines.md is stale: run `python -m app.pipeline.docs`"


def test_every_parameter_appears_once_in_its_cards_table():
    text = DOC.read_text()
    for card, module in cards().items():
        begin, end = marker(card)
        block = text[text.index(begin) : text.index(end)]
        for param in module.PARAMS:
            assert block.count(f"| `{param.name}` |") == 1, (card, param.name)
