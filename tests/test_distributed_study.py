"""Several machines on one study: concurrent sweeps on a real PostgreSQL server, machines of
different kinds sharing one study, and moving a study with `autotune study copy`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from autotune.contract import DeviceKind, HardwareFingerprint, Precision
from autotune.run.storage import open_storage
from autotune.search.machine import MachineSpace
from autotune.search.strategy import baseline_params
from autotune.search.study import open_study
from tests.fixtures.study_tools import cli_env, processes_under, run, sweep_argv, write_spec
from tests.pg import PASSWORD


def _all_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


@pytest.mark.e2e
def test_two_sweeps_on_one_study_concurrently(tmp_path, postgres):
    """Two `autotune sweep` processes on one PostgreSQL study at once: every trial number
    finished exactly once, nothing lost, no config measured twice, baselines enqueued once,
    the password nowhere in output, trial folders or the report. Then the study is copied to
    a SQLite file with its trial folders and reported from there."""
    study = f"dist{os.getpid()}"
    spec = write_spec(tmp_path, study, [1, 2])  # 2 configs; each sweep asks for 3 launches
    runs = [tmp_path / "runs_a", tmp_path / "runs_b"]
    procs = [subprocess.Popen(sweep_argv(spec, postgres.url, 3, r), cwd=tmp_path, env=cli_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in runs]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    # Neither measures a config the other measured; once both are, the leader may be measured
    # again (typed repeats, back to back with the runner-up), within each sweep's 3 trials.

    trials = optuna.load_study(study_name=study, storage=open_storage(postgres.url)).trials
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    finished = [t for t in trials if t.state.is_finished()]
    assert len(finished) >= 2 and all(t.state is TrialState.COMPLETE for t in finished), \
        [(t.number, t.state, t.user_attrs.get("error")) for t in trials]
    measured = [t for t in finished if "reused_from" not in t.user_attrs and "repeat_of" not in t.user_attrs]
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)) == 2  # each config measured once, by one of the two
    repeats = [t for t in finished if "repeat_of" in t.user_attrs]
    assert len(repeats) <= 4 and all(t.user_attrs["race_block"] for t in repeats)
    key_of = {t.number: t.user_attrs.get("config_key") for t in trials}
    assert all(t.user_attrs["config_key"] == key_of[t.user_attrs["repeat_of"]] for t in repeats)
    by_number = {t.number: t for t in trials}
    for t in finished:
        if "reused_from" in t.user_attrs:
            src = by_number[t.user_attrs["reused_from"]]
            assert src.user_attrs["config_key"] == t.user_attrs["config_key"]
            assert t.values == src.values
        assert t.user_attrs["hardware"].startswith("cpu:")
        assert t.user_attrs["machine"]["hostname"] and t.user_attrs["machine"]["device_count"] >= 1
    # The baselines (micro-batch 2, the largest, then half of it) enqueued once, not twice.
    baselines = [t for t in trials if t.user_attrs.get("baseline")]
    assert sorted(t.params["micro_batch_size"] for t in baselines) == [1, 2]
    # Each trial ran on one machine only: its folder exists under exactly one runs dir.
    folders = [Path(t.user_attrs["trial_dir"]).name for t in measured + repeats]
    assert all(sum((r / study / f / "result.json").is_file() for r in runs) == 1 for f in folders)

    report = run([*sweep_argv(spec, postgres.url, 1, runs[0])[:3], "report", "--storage", postgres.url,
                  "--study", study, "--json"], tmp_path)
    assert report.returncode == 0, report.stderr
    json.loads(report.stdout)
    for text in [*outs, report.stdout + report.stderr, _all_text(runs[0]), _all_text(runs[1])]:
        assert PASSWORD not in text and "S3cret" not in text

    copy = f"sqlite:///{tmp_path}/copy.db"
    # One machine may have measured both configs (the other reused them): copy from one that
    # holds trial folders.
    src_runs = next(r for r in runs if any((r / study).glob("trial_*/result.json")))
    r = run([*sweep_argv(spec, postgres.url, 1, runs[0])[:3], "study", "copy", postgres.url, copy,
             "--study", study, "--runs-dir", str(src_runs), "--to-runs-dir", str(tmp_path / "moved")],
            tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "S3cret" not in r.stdout + r.stderr
    copied = optuna.load_study(study_name=study, storage=copy).trials
    assert [(t.number, t.state, t.values) for t in copied] == [(t.number, t.state, t.values) for t in trials]
    moved = [t.user_attrs["trial_dir"] for t in copied
             if t.user_attrs.get("trial_dir", "").startswith(str(tmp_path / "moved"))]
    assert moved and all((Path(d) / "config.json").is_file() for d in moved)
    assert processes_under(tmp_path) == []


CPU2 = HardwareFingerprint(hostname="laptop", device_kind=DeviceKind.cpu, device_name="cpu", device_count=2,
                           cpu_model="x86", cpu_count=2)
GPU8 = HardwareFingerprint(hostname="node7", device_kind=DeviceKind.cuda, device_name="NVIDIA H100 80GB HBM3",
                           device_count=8, device_memory_bytes=80 * 10**9)


def test_machines_of_different_kinds_share_one_study(tmp_path):
    """A 2-core CPU machine and an 8-GPU machine (its capabilities only: nothing is launched,
    so no GPU is needed) suggest into one real study: Optuna accepts every parameter, each
    machine gets only what it can run, and the same kind of machine shares names."""
    from autotune.search.space import capabilities_for, restrict, suggest, unrestricted
    from autotune.search.space_file import load_space
    from autotune.spec import SweepSpec

    spec = SweepSpec()
    space = load_space(spec.space)
    full = unrestricted(space, n_heads=4)
    machines = {
        "cpu": MachineSpace(CPU2, restrict(space, capabilities_for(CPU2), 4), full),
        "gpu": MachineSpace(GPU8, restrict(space, dataclasses.replace(
            capabilities_for(GPU8, compute_capability=(9, 0)), zero_stages=frozenset({0, 1, 2, 3})), 4), full),
    }
    study = open_study(f"sqlite:///{tmp_path}/mixed.db", "mixed")
    seen: dict[str, list[dict]] = {"cpu": [], "gpu": []}
    for i in range(24):
        kind = "cpu" if i % 2 else "gpu"
        t = study.ask()
        values = suggest(t, machines[kind].restricted, None, full)
        seen[kind].append(values)
        study.tell(t, [1.0 + i, 2.0])
    assert max(v["num_gpus"] for v in seen["cpu"]) <= 2
    assert all(v["precision"].value in ("fp32", "bf16") for v in seen["cpu"])
    assert any(v["num_gpus"] > 2 for v in seen["gpu"])
    # Plain names on both machines (optuna-dashboard plots each across machines; on main the
    # CPU machine's was `num_gpus|of=1,2`), each with the study's full list.
    names = {n for t in study.trials for n in t.params}
    assert names <= {"num_gpus", "tp_degree", "micro_batch_size", "grad_accum_steps", "precision",
                     "checkpointing", "zero_stage", "offload", "fsdp"}, names
    dists = {(n, tuple(d.choices)) for t in study.trials for n, d in t.distributions.items()}
    assert len({n for n, _ in dists}) == len(dists)  # one choice list per name
    # Baselines use the same names; their values are each machine's own.
    cpu_base = baseline_params(machines["cpu"], None)
    assert all(p["num_gpus"] <= 2 for p in cpu_base)
    assert max(p["num_gpus"] for p in baseline_params(machines["gpu"], None)) == 8


def test_baselines_start_in_bf16_where_the_cpu_computes_it_natively():
    """fp32 on a CPU that emulates bf16 (measured 0.12x fp32's tokens/s), bf16 on one with
    AVX512-BF16 / AMX (1.21x), as on a GPU: the first configs follow the machine."""
    from autotune.search.space import capabilities_for, restrict, unrestricted
    from autotune.search.space_file import load_space
    from autotune.spec import SweepSpec

    space = load_space(SweepSpec().space).model_copy(update=dict(precision=[Precision.fp32, Precision.bf16]))
    full = unrestricted(space, n_heads=4)
    precisions = {}
    for bf16 in (None, "emulated", "native"):
        hw = CPU2.model_copy(update=dict(cpu_bf16=bf16))
        ms = MachineSpace(hw, restrict(space, capabilities_for(hw), 4), full)
        precisions[bf16] = {p["precision"] for p in baseline_params(ms, None)}
    assert precisions == {None: {"fp32"}, "emulated": {"fp32"}, "native": {"bf16"}}
