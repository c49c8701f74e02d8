"""The controller's layout, pinned: no import circle between modules, the worker imports only
the contract, the contract nothing else of the controller, the CLI path no torch, no module
over the size one reader holds in mind, and every package layer imports only layers below it.

Imports are read with `ast` from the source, all of them: module level, inside functions, and
under `if TYPE_CHECKING:` (a circle a type checker sees is still a circle to a reader).
"""

from __future__ import annotations

import ast
import re
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
    {"autotune.errors", "autotune.format", "autotune.names", "autotune.paths"},
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


# --- Readability rules (issue 29) ----------------------------------------------------------
# Each rule reads the source with `ast` / `tokenize`, and each has a test that plants a
# violation, so the rule itself can fail.

MAX_FUNCTION_LINES = 60
# Paths the function-length and comment rules skip (relative to the repository): none.
NOT_YET: tuple[str, ...] = ()
# Functions over the limit still to split, by "path:function": none; an entry would have to go
# once it no longer applies, so the list only shrinks.
LONG_FOR_NOW: set[str] = set()


def _checked_sources(not_yet: tuple[str, ...] = ()) -> dict[str, str]:
    """Source text of every module of autotune/ and trials/ by repository path, less `not_yet`."""
    out = {}
    for path in _modules().values():
        rel = path.relative_to(REPO).as_posix()
        if not rel.startswith(not_yet):
            out[rel] = path.read_text()
    return out


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's statements: its signature (typed options of a command can run
    long) and its docstring (what it does) do not count; nested functions do."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def _long_functions(sources: dict[str, str]) -> dict[str, int]:
    return {f"{rel}:{node.name}": n for rel, text in sources.items()
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := _body_lines(node)) > MAX_FUNCTION_LINES}


def test_no_function_over_the_limit():
    long = _long_functions(_checked_sources(NOT_YET))
    assert {k: v for k, v in long.items() if k not in LONG_FOR_NOW} == {}
    # An entry that no longer applies is removed, so the list only shrinks.
    assert all(k in long for k in LONG_FOR_NOW), sorted(set(LONG_FOR_NOW) - set(long))


def test_the_function_length_rule_finds_a_long_function():
    text = "def f():\n    '''doc'''\n" + "    x = 1\n" * (MAX_FUNCTION_LINES + 1)
    assert _long_functions({"m.py": text}) == {"m.py:f": MAX_FUNCTION_LINES + 1}
    assert _long_functions({"m.py": text.replace("    x = 1\n", "", 1)}) == {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(rel: str, text: str, known: set[str]) -> list[str]:
    """`from ours import _name`, and `mod._name` where `mod` names a module of ours that this
    file imported: a private name of another module of autotune/ or trials/."""
    name = rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    tree = ast.parse(text)
    modules: dict[str, str] = {}  # local name -> module of ours it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in known:
                    modules[a.asname or a.name] = full
                elif node.module in known and node.module != name and _private(a.name):
                    found.append(f"{rel}:{node.lineno} from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name) \
                and modules.get(node.value.id, name) != name:
            found.append(f"{rel}:{node.lineno} {modules[node.value.id]}.{node.attr}")
    return sorted(found, key=lambda f: int(f.split(" ")[0].rsplit(":", 1)[1]))


def test_no_private_name_imported_from_another_module():
    known = set(_modules())
    found = [f for rel, text in _checked_sources().items() for f in _private_imports(rel, text, known)]
    assert found == []


def test_the_private_import_rule_finds_one():
    known = {"autotune.run.launch", "trials.worker", "trials"}
    planted = ("from autotune.run.launch import _kill_group, run_trial\n"
               "from trials import worker\n"
               "import trials.worker as w\n"
               "worker._install_fault_handlers()\nw._x\nworker.run_one()\nself._y\n")
    assert [f.split(" ", 1)[1] for f in _private_imports("autotune/run/pool.py", planted, known)] == [
        "from autotune.run.launch import _kill_group", "trials.worker._install_fault_handlers",
        "trials.worker._x"]


# The controller <-> worker file protocol: its names live in autotune/contract/trial_files.py.
TRIAL_FILES_MODULE = "autotune/contract/trial_files.py"
_TRIAL_FILE_NAME = re.compile(
    r"(?<![\w.-])((config|result|command|nodes|launch)\.json|std(out|err)\.log|fatal\.rank)|\.trial\.json"
    r"|\.rank\*?\.json|rank\*?\.pid|^\.pid$|^autotune-pool-|^stop$")
# A literal that is not the protocol's: Hugging Face's model folder holds a config.json too.
NOT_THE_PROTOCOL = {
    ("autotune/contract/config.py", "config.json"),  # an HF model folder's config
}


def _string_literals(text: str) -> list[tuple[int, str]]:
    """Every string constant of the code, f-string parts included; docstrings left out (they
    may name the files they document)."""
    tree = ast.parse(text)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def _trial_file_literals(sources: dict[str, str]) -> list[str]:
    """String literals naming a file of the protocol outside its module (a literal with a space
    is prose, such as a message telling the user about a Hugging Face config.json)."""
    found = []
    for rel, text in sources.items():
        if rel == TRIAL_FILES_MODULE:
            continue
        for line, value in _string_literals(text):
            m = None if " " in value else _TRIAL_FILE_NAME.search(value)  # a space: prose
            if m and (rel, m.group(0)) not in NOT_THE_PROTOCOL:
                found.append(f"{rel}:{line} {value!r}")
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1].split(" ")[0])))


def test_trial_file_names_appear_only_in_the_contract():
    assert _trial_file_literals(_checked_sources()) == []


def test_the_trial_file_rule_finds_a_literal():
    planted = ('"""Writes result.json."""\n'
               'p = folder / "result.json"\nq = queue / f"{seq:06d}.trial.json"\n'
               'r = queue / "stop"\ns = "stopped"\n')
    assert _trial_file_literals({"autotune/run/x.py": planted}) == [
        "autotune/run/x.py:2 'result.json'", "autotune/run/x.py:3 '.trial.json'",
        "autotune/run/x.py:4 'stop'"]


# A comment says why in words that stay true; a figure of this project's own runs lives in
# docs/benchmarks.md, where it is regenerated. Flagged in comments and docstrings: a date
# (2026-11-30, 2026-11) unless it dates an outside source ("read 2026-11", "checked
# 2026-05", "as of 2026-01-10", "retrieved", "accessed", "released", a "draft"), and the
# shapes a measurement of ours takes: "measured"/"seen" with a figure (1.21x, 4 GiB, 25%),
# "N of M" (runs, replays), "NN/MM" (picks), an sd quoted to two places.
_DATE = re.compile(r"\b20\d\d-\d\d(-\d\d)?\b")
_SOURCED_DATE = re.compile(r"\b(read|checked|retrieved|accessed|as of|released|published|fetched|draft)"
                           r"( on)?,? 20\d\d-\d\d", re.I)
_OWN_MEASUREMENT = re.compile(
    r"\b(measured|seen)\b.*\d[\d.,]*\s*(x|%|GiB|MiB|GB|MB|s|ms|of)(?!\w)"
    r"|\b\d+ of ~?\d+\b(?! (ranks?|nodes?|GPUs?)\b)|\b\d\d+/\d\d+\b|\bsd\b.*\b0\.\d\d", re.I)


def _comment_lines(text: str) -> list[tuple[int, str]]:
    """Comments and docstrings, line by line, with their line numbers."""
    import io
    import tokenize

    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str):
            first = node.body[0].lineno
            out += [(first + i, line) for i, line in enumerate(node.body[0].value.value.splitlines())]
    return out


def _dated_measurements(sources: dict[str, str]) -> list[str]:
    found = []
    for rel, text in sources.items():
        for line, comment in _comment_lines(text):
            unsourced_date = _DATE.search(_SOURCED_DATE.sub("", comment))
            if unsourced_date or _OWN_MEASUREMENT.search(comment):
                found.append(f"{rel}:{line} {comment.strip()}")
    return found


def test_no_comment_cites_a_dated_measurement():
    assert _dated_measurements(_checked_sources(NOT_YET)) == []


def test_the_comment_rule_tells_a_measurement_from_a_source():
    planted = {
        "a.py": "# Measured on this project's machine, 2026-12-01: 1.21x.\nx = 1\n",
        "b.py": '"""Seen in 2 of ~40 FSDP2 runs here."""\n',
        "c.py": "# The ZeRO-3 rank peaks lower (measured: 4.14 GiB).\n",
        "d.py": "# 39/60 picks at --trials 16.\n",
        "e.py": "# Source: Linux cpufeatures.h, read 2026-11.\n# H100 datasheet (NVIDIA, as of 2026-01-10)\n"
                "# the measured peak per rank; a trial measured at every count\n",
    }
    assert [f.split(":")[0] for f in _dated_measurements(planted)] == ["a.py", "b.py", "c.py", "d.py"]
