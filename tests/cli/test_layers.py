"""The package's layering: imports only run downward (pyproject's import-linter contract), and no cycles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package and contract under `cwd` (its `coalign/` first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    script = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_layers_contract_is_kept():
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_an_import_from_a_lower_layer_to_a_higher_one_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "coalign", tmp_path / "coalign", ignore=shutil.ignore_patterns("__pycache__", "bases"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    errors = tmp_path / "coalign" / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom coalign.moat import recipe  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "coalign.core.errors -> coalign.moat.recipe" in done.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Groups of modules that import each other in a loop (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_in_a_loop():
    assert _cycles(grimp.build_graph("coalign")) == []


def test_the_cycle_finder_finds_a_loop():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph) == []
    graph.add_import(importer="c", imported="a")
    assert _cycles(graph) == [["a", "b", "c"]]
