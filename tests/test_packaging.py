"""The wheel a user installs holds everything a sweep needs, and works from outside the
checkout. (.ci/run goes further: the wheel into a fresh virtual environment with its
dependencies, then `autotune sweep --trials 1` from another folder.)"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_module_and_data_file_and_runs_outside_the_checkout(tmp_path):
    import shutil

    src = tmp_path / "src"  # built from a copy: the build leaves build/ and *.egg-info behind
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in ("autotune", "trials"):
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300,
                   cwd=tmp_path)
    # The distribution is autotune-llm ("autotune" on PyPI is another project); the import
    # package and the command stay autotune.
    (wheel,) = (tmp_path / "dist").glob("autotune_llm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {str(p.relative_to(REPO)) for pkg in ("autotune", "trials") for p in (REPO / pkg).rglob("*")
              if p.is_file() and p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts}
    assert source - names == set(), "missing from the wheel"
    assert "autotune/data/search_spaces/default.yaml" in names and "autotune/data/catalog.yaml" in names
    assert not any(n.startswith("tests/") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "autotune = autotune.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()

    # Installed (not editable) into a folder of its own, used from a folder outside the checkout:
    # the spaces and the catalog are read from the installed package, not the source tree.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(tmp_path / "site"), str(wheel)], check=True, capture_output=True, timeout=300)
    code = ("import autotune, autotune.search.space_file as s, autotune.pricing.load as c\n"
            "assert autotune.__file__.startswith(sys.argv[1]), autotune.__file__\n"
            "print(sorted(s.load_space('default').num_gpus), len(c.load_catalog(None).offers) > 0)\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    p = subprocess.run([sys.executable, "-c", "import sys\n" + code, str(tmp_path / "site")], cwd=elsewhere,
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[1, 2, 4, 8] True", p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-m", "autotune.cli", "--version"], cwd=elsewhere,
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("autotune "), p.stderr
