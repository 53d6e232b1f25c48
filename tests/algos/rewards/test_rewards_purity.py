"""algos/rewards is plain python (plus torch for the token-level tensor): no ray, no app, no transformers."""

import ast
import pathlib
import sys

REWARDS = pathlib.Path(__file__).resolve().parents[3] / "algos" / "rewards"


def test_rewards_import_only_stdlib_torch_and_algos():
    files = sorted(REWARDS.glob("*.py"))
    assert len(files) >= 7
    offenders = {}
    for path in files:
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
        bad = {r for r in roots if r not in sys.stdlib_module_names and r not in {"torch", "algos"}}
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}
