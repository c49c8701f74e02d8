"""`autotune sweep --skypilot-task GPU[:N]`: write SkyPilot tasks that run a sweep worker on each
named GPU type, into the same study (nothing runs here).

    autotune sweep spec.yaml --study llama --trials 6 --skypilot-task h100-sxm:8 \\
        --skypilot-task a100-80gb:8 --skypilot-task h200:8          # -> skypilot/autotune-*.yaml
    AUTOTUNE_STORAGE=postgresql://... sky launch --secret AUTOTUNE_STORAGE skypilot/autotune-h200x8.yaml

The task's workdir is this folder (SkyPilot syncs it), so the spec file, a --space file and every
file the spec names lie inside it, named by relative paths (refused otherwise); the storage URL
is a SkyPilot secret given at launch, never written into a task.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Optional

from autotune.errors import UserError


def parse_gpu(value: str) -> tuple[str, int]:
    """"h100-sxm:8" -> ("h100-sxm", 8); "h200" -> ("h200", 1), as SkyPilot reads "H200"."""
    name, _, count = value.partition(":")
    if not name or (count and not (count.isdigit() and int(count) > 0)):
        raise UserError(f"--skypilot-task '{value}' is not GPU[:COUNT]",
                        fix="write e.g. --skypilot-task h100-sxm:8 (types: autotune catalog)")
    return name, int(count) if count else 1


def worker_argv(spec_file: Optional[Path], study: str, forwarded: list[str]) -> list[str]:
    """The task's `autotune sweep`: every file it names (the spec, a --space file) by its path
    inside this folder, which the task syncs to the node as its workdir."""
    argv = ["autotune", "sweep"]
    if spec_file is not None:
        argv.append(_inside(spec_file, "spec file"))
    out = list(forwarded)
    for i, word in enumerate(out[:-1]):
        if word == "--space" and Path(out[i + 1]).suffix in (".yaml", ".yml"):
            out[i + 1] = _inside(Path(out[i + 1]), "--space file")
    return argv + ["--study", study, *out]


def _inside(path: Path, what: str) -> str:
    """`path` relative to this folder, as the task's node finds it in its workdir; a path
    outside it would not be there (the task would rent its GPUs, then fail)."""
    here, full = Path.cwd().resolve(), path.resolve()
    if here not in full.parents:
        raise UserError(f"{what} '{path}' lies outside this folder, which the task syncs to the "
                        "cloud node (its workdir)",
                        fix="run from a folder that holds the spec and every file it names, and name "
                            "them by paths inside it")
    return full.relative_to(here).as_posix()


def check_spec_files_inside(spec_file: Optional[Path]) -> None:
    """The files a spec names (space, catalog, a Hugging Face config, an entry point's
    python_path) are read on the node from the synced workdir: relative paths inside this
    folder, or the task fails there. A name of a shipped space needs no file."""
    from autotune.errors import load_yaml_file

    if spec_file is None:
        return
    raw = load_yaml_file(spec_file, "spec") or {}
    workload = raw.get("workload") or {}
    space = raw.get("space")  # a shipped name or an inline mapping needs no file
    named = [("space", space if isinstance(space, str) and Path(space).suffix in (".yaml", ".yml") else None),
             ("platforms.catalog", (raw.get("platforms") or {}).get("catalog")),
             ("workload.config_path", workload.get("config_path")),
             *[("workload.python_path", f) for f in workload.get("python_path") or []]]
    base = spec_file.resolve().parent
    for field, value in named:
        if not isinstance(value, str):
            continue
        where = f"spec file '{spec_file}', field {field}: '{value}'"
        if Path(value).is_absolute():
            raise UserError(f"{where} is an absolute path, which the cloud node, whose copy of this "
                            "folder lies elsewhere, does not have",
                            fix="name it by a path relative to the spec, inside this folder")
        full, here = (base / value).resolve(), Path.cwd().resolve()
        if full != here and here not in full.parents:  # a python_path may be the folder itself
            raise UserError(f"{where} lies outside this folder, which the task syncs to the cloud node "
                            "(its workdir)", fix="run from a folder that holds the spec and every file it "
                                                 "names, and name them by paths inside it")


def check_spec_has_no_secret(spec_file: Optional[Path]) -> None:
    """The task syncs its workdir, the spec file with it, to the cloud node: a spec whose
    `storage` holds a password would carry it there, so it is refused (as --storage is)."""
    from autotune.run.redact import redact_url, url_secrets
    from autotune.spec import load_spec

    stored = load_spec(spec_file).storage if spec_file is not None else None
    if stored and url_secrets(stored):
        raise UserError(f"spec file '{spec_file}' holds a storage URL with a password "
                        f"({redact_url(stored)}), and a SkyPilot task syncs the spec to the cloud node",
                        fix="remove `storage` from the spec and give the URL at launch: "
                            "AUTOTUNE_STORAGE=... sky launch --secret AUTOTUNE_STORAGE <task file>")


def write(spec, spec_file: Optional[Path], gpus: list[str], folder: Path, forwarded: list[str]) -> list[Path]:
    from autotune import __version__
    from autotune.pricing.load import load_catalog
    from autotune.report.files import SKYPILOT_TASKS, prepare_out_dir, write_files
    from autotune.run.skypilot_task import resolve_gpu, skypilot_task, task_yaml

    check_spec_has_no_secret(spec_file)
    check_spec_files_inside(spec_file)
    # Never over a file autotune did not write, nor over another command's.
    prepare_out_dir(folder, flag="--tasks-dir", force_flag=None, kind=SKYPILOT_TASKS)
    catalog = load_catalog(spec.platforms.catalog)
    argv = worker_argv(spec_file, spec.study, forwarded)
    tasks = {}
    for value in gpus:  # every task checked before any file is written
        name, count = parse_gpu(value)
        task = skypilot_task(catalog, resolve_gpu(catalog, name), count, argv,
                             install=f"autotune-llm[postgres]=={__version__}")
        tasks[task["name"]] = task
    return write_files(folder, {f"{name}.yaml": task_yaml(task) for name, task in tasks.items()},
                       kind=SKYPILOT_TASKS)


def describe(paths: list[Path]) -> str:
    lines = [f"wrote {len(paths)} SkyPilot task(s): " + ", ".join(str(p) for p in paths),
             "Launch each with the study's storage URL in AUTOTUNE_STORAGE (never in the file):"]
    lines += [f"  sky launch --secret AUTOTUNE_STORAGE {shlex.quote(str(p))}" for p in paths]
    if shutil.which("sky") is None:  # the tasks are written all the same: sky may run elsewhere
        lines.append("SkyPilot's `sky` command is not installed here: install it with `pip install skypilot` "
                     "(with your clouds' extras, e.g. skypilot[aws]), or launch from where it is")
    return "\n".join(lines)
