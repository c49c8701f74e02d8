"""The controller's layout, pinned: no import circle between modules, the worker imports only
the contract, the contract nothing else of the controller, the CLI path no torch, no module
over the size one reader holds in mind, and every package layer imports only layers below it.

Imports are read with `ast` from the source, all of them: module level, inside functions, and
under `if TYPE_CHECKING:` (a circle a type checker sees is still a circle to a reader).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("autotune", "trials")
MAX_LINES = 400
# Package layers of the controller, lowest first: a module may import its own layer and those
# below it, never one above (autotune/errors.py, format.py and the contract are the floor).
LAYERS = [
    {"autotune.contract"},
    {"autotune.errors", "autotune.format", "autotune.names"},
    {"autotune.estimate", "autotune.pricing", "autotune.record"},
    {"autotune.run", "autotune.spec"},
    {"autotune.search"},
    {"autotune.report"},
    {"autotune.cli", "autotune.api"},  # the commands, and the same from Python
]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `path` imports (`from a.b import c` counts a.b.c when c is a
    module, else a.b)."""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, name, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in layer):
            return i
    return None


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle():
    # The check itself can fail: a planted circle a -> b -> c -> a is reported.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_worker_imports_only_the_contract_and_the_contract_nothing_else():
    graph = _graph()
    for mod, deps in graph.items():
        if mod.startswith("trials"):
            outside = {d for d in deps if d.startswith("autotune") and _layer(d) != 0}
            assert not outside, f"{mod} imports {outside}: the worker imports only autotune.contract"
        if mod.startswith("autotune.contract"):
            assert all(d.startswith("autotune.contract") for d in deps), (mod, deps)


def test_packages_import_only_their_layer_and_below():
    graph = _graph()
    assert all(_layer(m) is not None for m in graph if m.startswith("autotune.")), \
        [m for m in graph if m.startswith("autotune.") and _layer(m) is None]
    upward = [(m, d) for m, deps in graph.items() for d in deps
              if m.startswith("autotune.") and d.startswith("autotune.") and _layer(d) > _layer(m)]
    assert upward == []


def test_no_module_over_the_limit():
    long = {str(p.relative_to(REPO)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_cli_path_imports_no_torch():
    """`import autotune.cli` and every command's --help run without importing torch (~3 s) or
    DeepSpeed (~4 s): the CLI starts fast."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from autotune.cli import app\n"
        "import typer.main\n"
        "names = [c.name for c in typer.main.get_command(app).commands.values()]\n"
        "runner = CliRunner()\n"
        "for n in names + ['study copy', 'catalog import']:\n"
        "    r = runner.invoke(app, n.split() + ['--help'])\n"
        "    assert r.exit_code == 0, (n, r.output)\n"
        "heavy = sorted(m for m in ('torch', 'deepspeed', 'accelerate', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
