"""Hydra command-line overrides checked against the typed schema before Hydra composes the config, so a misspelt key
ends the command with `unknown key K; did you mean N?` rather than Hydra's "Key 'K' is not in struct"."""

from __future__ import annotations

from typing import Iterable, Optional

from app.preflight.config_keys import is_known, unknown_key_message
from app.preflight.errors import PreflightError


def hydra_overrides(argv: list[str]) -> list[str]:
    """The `key=value` overrides of a Hydra app's command line (the options --config-name, -m, ... left out), read by
    the parser hydra.main itself uses."""
    from hydra._internal.utils import get_args_parser  # hydra.main's own parser: the same split of argv

    args, _ = get_args_parser().parse_known_args(argv)
    return list(args.overrides or [])


def check_overrides(overrides: Iterable[str], cls: type, where: str = "") -> None:
    """PreflightError naming the first override whose key is not a key of `cls` (nor inside one of its free-form
    mappings), with the nearest valid key. Hydra's own settings (`hydra.*`), config-group choices (`a/b=c`) and
    overrides Hydra cannot parse are left to Hydra, which reports those itself. `+key=value` (add) and `++key=value`
    (add or change) are checked the same way: the schema refuses a key it does not have whichever way it is given."""
    for key in override_keys(overrides):
        if not is_known(key, cls):
            raise PreflightError(unknown_key_message(key, cls, where))


def override_keys(overrides: Iterable[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    keys = []
    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException:
            continue  # a syntax error: Hydra's message says where
        key = _config_key(override.key_or_group, override.package)
        if key is not None:
            keys.append(key)
    return keys


def _config_key(key: str, package: Optional[str]) -> Optional[str]:
    if package is not None or "/" in key or key == "hydra" or key.startswith("hydra."):
        return None
    return key
