"""The usage lines of every module docstring (style: "module docstrings show usage in two or
three lines") call what the module has as it is called now: a call of a function or class the
module defines or imports binds to its signature. A renamed keyword or a new required argument
left the example stale (`restrict(..., shape_heads=4)` where the parameter is `n_heads`;
`submit(...)` without the job's log, which sbatch needs), and nothing ran those lines.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _modules() -> list[tuple[str, Path]]:
    found = []
    for pkg in ("autotune", "trials"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__main__":
                continue  # importing it runs the command line
            found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


def _usage_blocks(doc: str) -> list[str]:
    """The docstring's indented blocks (its usage lines), each dedented."""
    blocks, current = [], []
    for line in doc.splitlines() + [""]:
        if line.startswith("    ") and line.strip():
            current.append(line)
        elif current:
            blocks.append(textwrap.dedent("\n".join(current)))
            current = []
    return blocks


def _statements(block: str) -> list[ast.AST]:
    """The block parsed as Python, else each of its lines that parses alone (a shell line, a
    formula or a comment's continuation does not)."""
    try:
        return [ast.parse(block)]
    except SyntaxError:
        parsed = []
        for line in block.splitlines():
            try:
                parsed.append(ast.parse(line.strip()))
            except SyntaxError:
                pass
        return parsed


def _callee(module, func: ast.AST):
    """The callable a call names, where the module itself defines or imports it."""
    if isinstance(func, ast.Name):
        return getattr(module, func.id, None)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = getattr(module, func.value.id, None)
        if inspect.isclass(owner) or inspect.ismodule(owner):
            attr = inspect.getattr_static(owner, func.attr, None)
            if isinstance(attr, (classmethod, staticmethod)) or inspect.ismodule(owner):
                return getattr(owner, func.attr, None)
    return None


def _stale_calls(module, doc: str) -> list[str]:
    stale = []
    for block in _usage_blocks(doc):
        for tree in _statements(block):
            for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
                if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                    continue
                if any(isinstance(a, ast.Constant) and a.value is Ellipsis for a in ast.walk(call)):
                    continue  # `f(..., x=1)`: arguments left out on purpose
                fn = _callee(module, call.func)
                if not callable(fn):
                    continue
                try:
                    sig = inspect.signature(fn)
                except (TypeError, ValueError):
                    continue
                try:
                    sig.bind(*call.args, **{k.arg: k.value for k in call.keywords if k.arg})
                except TypeError as exc:
                    stale.append(f"{ast.unparse(call)}: {exc} (signature {sig})")
    return stale


@pytest.mark.parametrize("name,path", _modules(), ids=[m for m, _ in _modules()])
def test_a_module_docstrings_usage_calls_bind_to_the_signatures(name, path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc:
        return
    module = importlib.import_module(name)
    assert _stale_calls(module, doc) == [], f"{path.relative_to(REPO)}'s docstring"


def _resolves(ref: str) -> bool:
    """`a.b.c` names a module, or an attribute (a pydantic field too) of the longest module
    it starts with."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if attr in (getattr(obj, "model_fields", None) or {}):
                return True
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _texts() -> dict[str, str]:
    texts = {str(path.relative_to(REPO)): ast.get_docstring(ast.parse(path.read_text())) or ""
             for _, path in _modules()}
    for doc in ("README.md", "docs/architecture.md", "docs/cluster.md"):
        texts[doc] = (REPO / doc).read_text()
    return texts


def test_the_dotted_names_the_docs_and_docstrings_cite_exist():
    """A module docstring pointed at `autotune.report.export.settings_env`, which lives in
    autotune.report.export_launch: every `autotune.x.y` / `trials.x.y` a document or a module
    docstring names is a module or something one defines."""
    missing = []
    for where, text in _texts().items():
        for ref in sorted(set(re.findall(r"(?<![\w/])((?:autotune|trials)(?:\.[A-Za-z_]\w*)+)", text))):
            if not ref.endswith((".py", ".md", ".yaml", ".json")) and not _resolves(ref):
                missing.append(f"{where}: {ref}")
    assert missing == []


def test_the_floor_docstrings_memory_figures_are_their_raw_files():
    """autotune.search.floor quotes what CPU ranks held before the build, pooled against fresh:
    each figure recomputed from the raw files it names (the larger rank of each run)."""
    import json

    import autotune.search.floor as floor

    doc = " ".join((floor.__doc__ or "").split())
    mib = 2**20

    def held(path: str) -> dict[str, list[float]]:
        entries = json.loads((REPO / path).read_text())["entries"]
        return {key: [max(r["memory"]["host_rss_baseline_bytes"]) / mib for r in e["results"]
                      if (r.get("memory") or {}).get("host_rss_baseline_bytes")]
                for key, e in entries.items()}

    pooled = held("benchmarks/results/truth_big_pool.json")
    runs = [b for bs in pooled.values() for b in bs]
    widest = max(pooled.values(), key=lambda bs: max(bs) - min(bs))
    assert (f"{min(runs):.0f} to {max(runs):.0f} MiB over the {len(runs)} pooled runs of "
            f"benchmarks/results/truth_big_pool.json ({min(widest):.0f} to {max(widest):.0f} over one "
            f"config's {len(widest)})") in doc
    fresh = [b for bs in held("benchmarks/search_ground_truth.json").values() for b in bs]
    assert (f"{min(fresh):.0f} to {max(fresh):.0f} MiB over the {len(fresh)} fresh runs of "
            "benchmarks/search_ground_truth.json") in doc


def test_architecture_md_lists_the_layers_test_layout_pins():
    """docs/architecture.md's layer list is tests/test_layout.py's LAYERS, module for module
    (it left autotune/paths.py out of its layer)."""
    from tests.test_layout import LAYERS

    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 2)[1]
    listed = []
    for line in block.splitlines():
        names = re.split(r"\s{3,}", line)[0].replace(",", " ").split()  # the first column
        if not names or names[0] == "trials/":
            continue
        first = names[0].rstrip("/").removesuffix(".py").replace("/", ".")
        package = first.rpartition(".")[0]
        listed.append({first} | {f"{package}.{n.rstrip('/').removesuffix('.py')}" for n in names[1:]})
    assert listed == LAYERS
