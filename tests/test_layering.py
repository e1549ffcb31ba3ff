"""Layering and import circles of the installed `odqa` namespace, with relative imports resolved.

The layers import each other relatively (`from ..storage.tables import ...`), so that an install
puts only `odqa` on sys.path. A checker that names modules from the repository's top level cannot
resolve an import that climbs above a top-level folder; this test names every module inside the
`odqa` namespace, resolves each import there, and applies the design's rules: flows (and the other
top-floor packages: the API, the service) -> models -> pipelines -> storage, no layer imports one
above it, nothing below flows imports Prefect, and no import circles."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["storage", "pipelines", "models", "flows"]  # bottom to top
TOP_FLOOR = ["api", "service", "odqa"]
NO_PREFECT = {"storage", "pipelines", "models"}


def _modules() -> dict[str, Path]:
    """Every module of the namespace by its installed name (odqa.storage.tables, odqa.api.search)."""
    found = {}
    for top in LAYERS + TOP_FLOOR:
        for path in (REPO_ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts if parts[0] == "odqa" else ["odqa", *parts])] = path
    return found


def _imports(path: Path, name: str) -> list[tuple[str, int]]:
    """(imported name, line) of every import in the file, lazy ones included, relative resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                assert node.level <= len(base), f"{path}:{node.lineno}: relative import above the odqa package"
                prefix = ".".join(base[: len(base) - node.level + 1])
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _floor(module: str) -> tuple[str, int]:
    """(layer, floor) of an odqa module: the layers bottom to top; the API, the service and the
    facade share flows' floor (the top)."""
    part = module.split(".")[1] if module.startswith("odqa.") else "odqa"
    return part, LAYERS.index(part) if part in LAYERS else len(LAYERS) - 1


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def _check() -> tuple[list[str], list[list[str]], int]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    problems = []
    for name, path in modules.items():
        layer, floor = _floor(name)
        for target, line in _imports(path, name):
            where = f"{path.relative_to(REPO_ROOT)}:{line}"
            if target.split(".")[0] == "prefect" and layer in NO_PREFECT:
                problems.append(f"{where}: {layer}/ imports prefect")
            if target.split(".")[0] in LAYERS + TOP_FLOOR[:2]:
                problems.append(f"{where}: imports {target} by a top-level name (use the odqa namespace)")
            if not target.startswith("odqa."):
                continue
            target_layer, target_floor = _floor(target)
            if target_floor > floor:
                problems.append(f"{where}: {layer}/ imports {target} (a layer above)")
            parts = target.split(".")
            for cut in range(len(parts), 1, -1):  # the longest module the import names
                candidate = ".".join(parts[:cut])
                if candidate in modules and candidate != name:
                    graph[name].add(candidate)
                    break
    return problems, _circles(graph), sum(len(edges) for edges in graph.values())


def test_no_layer_imports_one_above_it_and_no_circles() -> None:
    problems, circles, edges = _check()
    assert edges > 500, "the imports were not resolved (the check would pass on anything)"
    assert problems == []
    assert circles == []


def test_the_check_sees_an_upward_relative_import(tmp_path: Path, monkeypatch) -> None:
    """The check itself: an upward import written relatively is found."""
    path = REPO_ROOT / "storage" / "locks.py"
    text = path.read_text(encoding="utf-8")
    copy = tmp_path / "locks.py"
    copy.write_text(text + "\nfrom ..flows.plumbing.console import tell\n", encoding="utf-8")
    found = [target for target, _ in _imports(copy, "odqa.storage.locks")]
    assert "odqa.flows.plumbing.console.tell" in found
    assert _floor("odqa.flows.plumbing.console")[1] > _floor("odqa.storage.locks")[1]


def test_flows_is_laid_out_by_job_and_loads_no_module_by_name() -> None:
    """flows/ keeps a handful of job packages at its top (stages, compositions, plumbing, backend,
    the CLI), and only the CLI's lazy verb loading imports a module by name: the pipeline calls
    its stage flows directly."""
    flows = REPO_ROOT / "flows"
    top = sorted(p.name for p in flows.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())
    assert len(top) <= 12, top
    assert {"stages", "compositions", "plumbing", "backend", "cli"} <= set(top)
    by_name = []
    for path in flows.rglob("*.py"):
        if path.relative_to(flows).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import | ast.ImportFrom) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if "importlib" in names or (module or "").startswith("importlib"):
                by_name.append(str(path.relative_to(REPO_ROOT)))
    assert by_name == []
