"""The project's import graph has no circle and no upward import between its layers (beside the purity tests of
tests/algos, which keep algos/ free of app/, serve/ and Ray).

Every .py under algos/, app/ and serve/ is parsed with `ast`; every import counts, those inside functions too (they
still run, later). A module's layer comes from the longest package prefix in LAYERS, so a new module in a known
package needs no edit here; a new package or top-level module of app/ fails until it is given a layer below.

`from pkg import name` is an edge to the submodule `pkg.name` when there is one, else to `pkg` (its __init__). The
parent packages a submodule import also executes are not edges: Python runs them first and a submodule never needs
its parent's names, so they cannot form a circle that fails at import time. Imports under `if TYPE_CHECKING:` never
run: they count for the layers (a type from above is still a dependency on above) but not for circles (a Protocol
may name the config type of the module that implements it).
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOP_PACKAGES = ("algos", "app", "serve")

# Lower numbers sit lower: a module may import its own layer and the layers below it, never one above.
LAYERS: dict[str, int] = {
    # 0: pure tensor math and reward functions, importing nothing of the project (tests/algos checks the rest)
    "algos": 0,
    # 1: the tensor-side building blocks: engines (model + optimizer) and what they eat; prompt datasets
    "app.engine": 1,
    "app.batch": 1,
    "app.data": 1,
    # multi-turn tool use: tools, tool calls, trajectories and the agent loop over any rollout client (the tool task in
    # app.data lists its tools; the config checks a tool config file)
    "app.agents": 1,
    # 2: the typed config and its checks; above the engine, whose DeepSpeed JSON merging and dtype rule it reuses
    "app.config": 2,
    # 3: roles drive an engine with the config's settings; reward scoring (rule, custom, reward model) beside them
    "app.roles": 3,
    "app.rewards": 3,
    # 4: the run's driver and workers: the training loop, the Ray launch, what it checks before Ray starts
    # (preflight reuses the trainer's checkpoint and data checks; the launch reuses preflight's cluster check), logs
    "app.trainer": 4,
    "app.preflight": 4,
    "app.job_paths": 4,
    "app.logs": 4,
    # 5: entry points (python -m app.<verb>) and what only they use
    "app": 5,
    "app.train": 5,
    "app.sweep": 5,
    "app.dry_run": 5,
    "app.prepare": 5,
    "app.plot": 5,
    "app.import_model": 5,
    "app.failure_report": 5,
    "app.pipeline": 5,
    "app.tuning": 5,
}
# serve/ (the rollout deployment) imports nothing from app/; app/ imports it from this layer up
SERVE_USERS_FROM = LAYERS["app.trainer"]
# (importing package, serve module) allowed below SERVE_USERS_FROM, and why
SERVE_EXEMPTIONS = {
    ("app.config", "serve.http_access"): "the API-key rule of the OpenAI routes, which the config check applies "
    "before a run and the deployment enforces; stdlib only (no Ray, no routes)",
    ("app.agents", "serve.types"): "the rollout client's request and sample types, which the agent loop sends and "
    "receives turn by turn; plain dataclasses (no Ray, no vLLM)",
    ("app.config", "serve.types"): "the vLLM engine arguments a replica sets itself, which the config refuses in "
    "rollout.engine_kwargs.vllm naming the key that sets each; plain data (no Ray, no vLLM)",
}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported project module
    where: str  # file:line
    text: str  # the import statement
    typing_only: bool = False  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        return f"{self.where}: `{self.text}` ({self.source} -> {self.target})"


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for top in TOP_PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _project_module(name: str, mods: dict[str, pathlib.Path]) -> str | None:
    """The project module that `import name` runs last (name itself, or its nearest package), None if not ours."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _edges(mods: dict[str, pathlib.Path]) -> list[Edge]:
    edges = []
    for source, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [_project_module(alias.name, mods) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else _project_module(base, mods))
            where = f"{path.relative_to(ROOT)}:{node.lineno}" if targets else ""
            for target in {t for t in targets if t and t != source}:
                edges.append(Edge(source, target, where, ast.unparse(node), id(node) in typing_only))
    return edges


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _layer(module: str) -> int | None:
    name = module
    while name:
        if name in LAYERS:
            return LAYERS[name]
        name = name.rpartition(".")[0]
    return None


def _package(module: str, table) -> str:
    name = module
    while name and name not in table:
        name = name.rpartition(".")[0]
    return name


def test_every_app_module_has_a_layer():
    missing = sorted(m for m in _modules() if m.startswith("app") and _layer(m) is None)
    assert not missing, f"give these a layer in LAYERS of {pathlib.Path(__file__).name}: {missing}"


def test_no_import_goes_up_a_layer():
    mods = _modules()
    upward = []
    for edge in _edges(mods):
        src_top, dst_top = edge.source.split(".")[0], edge.target.split(".")[0]
        if src_top == "serve":
            if dst_top != "serve":
                upward.append(f"{edge}: serve imports nothing from {dst_top}/")
            continue
        if dst_top == "serve":
            src_layer = _layer(edge.source)
            exempt = (_package(edge.source, LAYERS), edge.target) in SERVE_EXEMPTIONS
            if src_layer is not None and src_layer < SERVE_USERS_FROM and not exempt:
                upward.append(f"{edge}: serve is imported from {_package(edge.source, LAYERS)}, below app.trainer")
            continue
        src_layer, dst_layer = _layer(edge.source), _layer(edge.target)
        if src_layer is not None and dst_layer is not None and dst_layer > src_layer:
            upward.append(
                f"{edge}: layer {src_layer} ({_package(edge.source, LAYERS)}) imports layer {dst_layer} "
                f"({_package(edge.target, LAYERS)})"
            )
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    mods = _modules()
    edges = _edges(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    edges = [e for e in edges if not e.typing_only]
    for edge in edges:
        graph[edge.source].add(edge.target)
    circles = [c for c in _strongly_connected(graph) if len(c) > 1]
    report = []
    for circle in circles:
        inside = sorted(str(e) for e in edges if e.source in circle and e.target in circle)
        report.append(f"circle of {len(circle)} modules {sorted(circle)}:\n  " + "\n  ".join(inside))
    assert not circles, "\n".join(report)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough to matter for recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def test_the_checks_see_a_circle_and_an_upward_import():
    # the checks themselves: a made-up graph with a circle, and a made-up upward edge
    assert {
        frozenset(c) for c in _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) if len(c) > 1
    } == {frozenset("abc")}
    assert _layer("app.engine.sharded") == 1 and _layer("app.config.new_check") == 2
    assert _layer("app.trainer.new_module") == 4  # a new module in a known package needs no edit
    mods = _modules()
    assert len(mods) > 150 and "app.config.loader" in mods
    edges = _edges(mods)
    # imports inside functions count: check_deepspeed imports the engine's DeepSpeed JSON code when it runs
    assert any(e.source == "app.config.deepspeed_check" and e.target == "app.engine.deepspeed_config" for e in edges)
    # a Protocol's TYPE_CHECKING import of the config type it names is seen, and known as never run
    assert [
        e.typing_only for e in edges if (e.source, e.target) == ("algos.protocols", "algos.policy_loss_config")
    ] == [True]
