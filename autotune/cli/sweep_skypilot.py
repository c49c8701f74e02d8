"""`autotune sweep --skypilot-task GPU[:N]`: write SkyPilot tasks that run a sweep worker on each
named GPU type, into the same study (nothing runs here).

    autotune sweep spec.yaml --study llama --trials 6 --skypilot-task h100-sxm:8 \\
        --skypilot-task a100-80gb:8 --skypilot-task h200:8          # -> skypilot/autotune-*.yaml
    AUTOTUNE_STORAGE=postgresql://... sky launch --secret AUTOTUNE_STORAGE skypilot/autotune-h200x8.yaml

The task's workdir is this folder (SkyPilot syncs it), so the spec file must lie inside it; the
storage URL is a SkyPilot secret given at launch, never written into a task.
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
    argv = ["autotune", "sweep"]
    if spec_file is not None:
        here, spec = Path.cwd().resolve(), spec_file.resolve()
        if here not in spec.parents:
            raise UserError(f"spec file '{spec_file}' lies outside this folder, which the task "
                            "syncs to the cloud node (its workdir)",
                            fix="run from a folder that holds the spec (and what it names)")
        argv.append(spec.relative_to(here).as_posix())
    return argv + ["--study", study, *forwarded]


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
