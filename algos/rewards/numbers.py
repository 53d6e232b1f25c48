"""Finding and comparing plain numbers in model output (GSM8K-style answers)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number as people write it: optional sign, either comma-grouped thousands ("1,250") or plain digits, optional
# decimals; also a bare ".5". Grouping must be exact so that a list "1,2,3" is not read as 123.
NUMBER_PATTERN = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_NUMBER_RE = re.compile(NUMBER_PATTERN)


def parse_number(text: str) -> Decimal | None:
    """``"$1,250.50"`` -> Decimal("1250.50"); None when ``text`` is not a single number."""
    if text is None:
        return None
    s = str(text).strip().replace("$", "").replace(",", "").rstrip(".").strip()
    if not s:
        return None
    try:
        value = Decimal(s)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def numbers_equal(predicted: str | None, gold: str) -> bool:
    """Numeric equality ("18.0" == "18", "1,000" == "1000"); falls back to exact text when either is not a number."""
    if predicted is None:
        return False
    a, b = parse_number(predicted), parse_number(gold)
    if a is not None and b is not None:
        return a == b
    return str(predicted).strip() == str(gold).strip()


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (commas kept), or None."""
    found = _NUMBER_RE.findall(text)
    return found[-1] if found else None
