"""algos/ is pure tensor math: it may import only torch, numpy, the stdlib and itself."""

import ast
import pathlib
import sys

ALGOS = pathlib.Path(__file__).resolve().parents[2] / "algos"
ALLOWED_THIRD_PARTY = {"torch", "numpy"}


def _imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_algos_imports_only_torch_numpy_stdlib():
    # algos/rewards/ has its own owner and tests; everything else here is checked.
    files = [p for p in ALGOS.rglob("*.py") if "rewards" not in p.relative_to(ALGOS).parts]
    assert len(files) >= 9, files
    offenders = {}
    for path in files:
        bad = {
            root
            for root in _imported_roots(path)
            if root not in sys.stdlib_module_names and root not in ALLOWED_THIRD_PARTY and root != "algos"
        }
        if bad:
            offenders[str(path.relative_to(ALGOS))] = sorted(bad)
    assert offenders == {}
