"""torch.compile as a search dimension: the space, the config key, the charge in the score, and
real compiled trials and a real sweep on 2 CPU ranks (Inductor's C++ backend, built with gcc).

The real ones share one study folder: a lone trial (`autotune trial --out`) keeps Inductor's
cache in its own trial folder and loads it when run again there; the sweep's trials share the
study's cache (`autotune_runs/<study>/compile_cache`), which the lone trial's does not seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.contract import HardwareFingerprint, Precision, TrialConfig
from autotune.pricing.load import load_catalog
from autotune.search.score import with_compile
from autotune.search.space import capabilities_for, restrict
from autotune.search.space_file import SearchSpace, load_space
from autotune.search.space_walk import enumerate_configs, steps
from tests.fixtures.bills import bill_of

REPO = Path(__file__).resolve().parent.parent
H100x8 = HardwareFingerprint(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", device_count=8)


def _hopper(space: SearchSpace):
    return restrict(space, capabilities_for(H100x8, compute_capability=(9, 0), fp8_library=True))


def test_fp8_is_offered_only_together_with_compile():
    rs = _hopper(SearchSpace(num_gpus=[1], precision=[Precision.bf16, Precision.fp8], compile=[False, True]))
    configs = [values for _, values in enumerate_configs(rs)]
    pairs = sorted((v["precision"].value, v["compile"]) for v in configs)
    assert pairs == [("bf16", False), ("bf16", True), ("fp8", True)]
    # A local move from compiled fp8 never lands on eager fp8.
    fp8 = next(v for v in configs if v["precision"] is Precision.fp8)
    assert all(not (m["precision"] is Precision.fp8 and not m["compile"]) for *_, m in steps(fp8, rs))


def test_a_space_without_compile_asks_no_compile_parameter():
    rs = restrict(load_space("default"), capabilities_for(HardwareFingerprint(cpu_count=2)))
    params, values = enumerate_configs(rs, limit=10_000)[0]
    assert "compile" not in params and values["compile"] is False


def test_config_key_keeps_eager_keys_and_tells_compiled_apart():
    from autotune.search.reuse import config_key

    eager = TrialConfig()
    doc = eager.model_dump(mode="json")
    del doc["compile"]  # a config recorded before the field existed
    assert config_key(eager, "hw") == config_key(TrialConfig.model_validate(doc), "hw")
    assert config_key(eager.model_copy(update={"compile": True}), "hw") != config_key(eager, "hw")


def test_compile_time_is_charged_once_to_the_run():
    from autotune.search.score import with_compile

    # 1e6 tokens at 1000 tokens/s: 1000 s of steps, + 500 s compile = 1500 s.
    assert 1e6 / with_compile(1000.0, 1e6, 500.0) == pytest.approx(1500.0)
    assert with_compile(1000.0, 1e6, None) == 1000.0


def test_compiled_configs_calibrate_apart_and_the_estimate_says_what_it_assumes():
    from autotune.estimate.compute import model_from_preset
    from autotune.estimate.memory import MemoryConfig, estimate_memory
    from autotune.search.calibration import calibration_group

    cfg = TrialConfig(compile=True, num_gpus=2)
    mcfg = MemoryConfig.from_trial_config(cfg)
    assert calibration_group(mcfg) == "ddp-compiled"
    assert calibration_group(MemoryConfig.from_trial_config(TrialConfig(num_gpus=2))) == "ddp"
    notes = estimate_memory(model_from_preset("tiny"), mcfg).notes
    assert any("compiled: activations as eager keeps them" in n for n in notes), notes


def test_accelerate_trials_compile_through_its_dynamo_backend(tmp_path):
    from autotune.run.launch import build_argv

    def backend(compiled: bool) -> str:
        argv = build_argv(TrialConfig(launcher="accelerate", compile=compiled), tmp_path / "c.json",
                          tmp_path / "r.json", 29500)
        return argv[argv.index("--dynamo_backend") + 1]

    assert (backend(False), backend(True)) == ("no", "inductor")


# A fresh process, as a pooled trial runs (trials/pool.py): it imports its workload's modules
# (torch._dynamo among them, which imports Inductor) before trials.compile. Prints what that
# import left in the variable, and the folder the trial then caches in.
_CACHE_PROBE = """
import json, os, sys
from pathlib import Path
from autotune.contract import TrialConfig
from trials.workloads.build import import_workload_modules
import_workload_modules(TrialConfig(workload={"kind": sys.argv[2], "model_type": "llama"}
                                    if sys.argv[2] == "hf" else {"kind": "gpt", "preset": "tiny"}))
before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
from trials.compile import use_study_cache
print(json.dumps({"before": before, "folder": use_study_cache(Path(sys.argv[1]))}))
"""


@pytest.mark.parametrize("kind,users_folder", [("gpt", None), ("hf", None), ("gpt", "my_cache")])
def test_a_trial_that_imports_its_workload_first_still_caches_in_the_study(tmp_path, kind, users_folder):
    """Inductor writes its default folder into TORCHINDUCTOR_CACHE_DIR when it is imported: that
    is not the user's cache, and the study's is used. A folder the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    if users_folder:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / users_folder)
    result_path = tmp_path / "study" / "trial_0" / "result.json"
    out = subprocess.run([sys.executable, "-c", _CACHE_PROBE, str(result_path), kind], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if users_folder is None:
        assert got["before"] is not None  # the premise: the workload's imports set it
        assert got["folder"] == str((tmp_path / "study" / "compile_cache").resolve())
    else:
        assert got["folder"] == str(tmp_path / users_folder)


# ------------------------------------------------------------------------------------------
# Real compiled trials on 2 CPU ranks
# ------------------------------------------------------------------------------------------

TRIAL = dict(workload={"kind": "gpt", "preset": "tiny"}, seq_len=64, micro_batch_size=2,
             num_gpus=2, warmup_steps=1, measure_steps=2, max_measure_steps=3, timeout_s=600)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    """One study's folder (`autotune_runs/compile`), shared by the real tests: the sweep's
    trials share one cache there; a lone trial keeps its own in its folder."""
    root = tmp_path_factory.mktemp("compile")
    (root / "autotune_runs" / "compile").mkdir(parents=True)
    return root


def _trial(run_cli, root: Path, name: str, env: dict | None = None, **fields) -> dict:
    (root / f"{name}.json").write_text(json.dumps({**TRIAL, **fields}))
    p = run_cli("trial", f"{name}.json", "--json", "--out", f"autotune_runs/compile/{name}",
                cwd=root, env=env)
    result = root / "autotune_runs" / "compile" / name / "result.json"
    assert result.is_file(), f"exit {p.returncode}: {p.stdout}{p.stderr}"  # any status, but a result
    return json.loads(result.read_text())


@pytest.mark.e2e
def test_a_compiled_ddp_trial_reports_compile_seconds_apart_from_tokens_per_s(run_cli, study_dir):
    r = _trial(run_cli, study_dir, "ddp", compile=True)
    assert r["status"] == "ok", r["error"]
    assert r["tokens_per_s"] > 0 and r["world_size"] == 2
    assert r["observations"]["compiled"] is True
    # The first step compiled: it took longer than the steady step, by compile_s.
    first = r["observations"]["compile"]["warmup_step_times_s"][0]
    assert r["compile_s"] == pytest.approx(first - r["step_time_median_s"], rel=1e-6)
    assert r["compile_s"] > 0
    assert r["phase_s"]["compile"] == r["compile_s"]
    # A lone trial (`autotune trial --out`) keeps Inductor's cache in its own folder: before, it
    # went beside the folder (as a study's trials share theirs), into a folder of the user's.
    cache = Path(r["observations"]["compile"]["cache_dir"])
    assert cache == study_dir / "autotune_runs" / "compile" / "ddp" / "compile_cache" and any(cache.iterdir())
    assert sorted(p.name for p in (study_dir / "autotune_runs" / "compile").iterdir()) == ["ddp"]
    # Run again into the same folder (its own earlier output: no --force needed), it loads the
    # graphs the first run compiled from that cache.
    again = _trial(run_cli, study_dir, "ddp", compile=True)
    assert again["status"] == "ok" and again["observations"]["compile"]["fxgraph_cache_hit"] > 0, again


@pytest.mark.e2e
def test_a_compiler_that_fails_is_an_unsupported_trial_with_its_reason(run_cli, study_dir, tmp_path):
    # No working C++ compiler, and a cache of its own (a warm cache would need no compiler).
    r = _trial(run_cli, study_dir, "no_cxx", env={"CXX": "/bin/false",
                                                  "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")},
               compile=True, num_gpus=1)
    assert r["status"] == "unsupported", r
    assert r["error"].startswith("torch.compile failed (")
    assert "No working C++ compiler" in r["error"], r["error"]


SPEC = """
workload: {kind: gpt, preset: tiny}
seq_len: 64
target: {tokens: 1.0e6}
space: space.yaml
trial: {warmup_steps: 1, measure_steps: 2, max_measure_steps: 3, timeout_s: 600}
study: compile
"""


@pytest.mark.e2e
def test_a_sweep_measures_eager_and_compiled_and_its_pick_pays_the_compile(run_cli, study_dir):
    (study_dir / "space.yaml").write_text("num_gpus: [2]\nmicro_batch_size: [2]\nprecision: [fp32]\n"
                                          "compile: [false, true]\n")
    (study_dir / "spec.yaml").write_text(SPEC.replace("space.yaml", str(study_dir / "space.yaml")))
    p = run_cli("sweep", "spec.yaml", "--trials", "2", cwd=study_dir)
    assert p.returncode == 0, p.stdout + p.stderr
    q = run_cli("report", "--study", "compile", "--json", cwd=study_dir)
    doc = json.loads(q.stdout)
    ran = [t for t in doc["trials"] if t["reused_from"] is None and t["status"] == "ok"]
    assert sorted(t["config"]["compile"] for t in ran) == [False, True]
    hours = {}
    for t in ran:
        # Hours on the offer: the shipped bill (autotune.pricing.cost.compute_bill: setup +
        # steps at the measured tokens/s + checkpoint writes) of the target's 1e6 tokens, with
        # the compile charged once for the compiled config (with_compile); the eager one has none.
        assert t["offer"] == "aws-c7i-ondemand"
        compile_s = t["compile_s"] or 0.0
        assert (compile_s > 0) == t["config"]["compile"]
        bill = bill_of(Path(t["trial_dir"]), study_dir / "spec.yaml", t["offer"])
        assert bill.tokens == 1.0e6
        assert bill.tokens_per_s == pytest.approx(with_compile(t["tokens_per_s"], 1.0e6, compile_s), rel=1e-12)
        hours[t["number"]] = bill.hours
        assert t["hours"] == pytest.approx(bill.hours, rel=1e-9)
        # ... by the formula itself: setup + the steps at the measured rate + the compile once,
        # plus checkpoint writes (a tiny model's: under 0.1%).
        floor_h = load_catalog().offer(t["offer"]).setup_hours + (1.0e6 / t["tokens_per_s"] + compile_s) / 3600
        assert floor_h <= t["hours"] <= floor_h * 1.001
    assert doc["fastest"]["trial"] == min(hours, key=hours.get)
    # The compiled trial ran in the sweep's worker pool, which imports the workload (and with it
    # Inductor) before trials.compile, and it cached in the study's folder all the same.
    runs = study_dir / "autotune_runs" / "compile"
    compiled = [r for r in (json.loads(f.read_text()) for f in runs.glob("trial_*/result.json"))
                if r["observations"].get("compiled")]
    assert compiled and all(r["observations"].get("pool") for r in compiled)
    assert {r["observations"]["compile"]["cache_dir"] for r in compiled} == {str((runs / "compile_cache").resolve())}
    assert "compiled" in p.stdout  # the config label in the sweep's own lines


def test_plan_ranks_fp8_by_the_stated_ratio_over_bf16_never_by_its_peak(tmp_path):
    from autotune.estimate.compute import FP8_SPEEDUP_OVER_BF16
    from autotune.search.plan import plan
    from autotune.spec import SweepSpec

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [8]\nmicro_batch_size: [2]\nprecision: [bf16, fp8]\nzero_stage: [3]\n"
                     "compile: [false, true]\n")
    spec = SweepSpec(workload={"kind": "gpt", "preset": "7b"}, seq_len=4096, target={"tokens": 1e11},
                     batch={"global_batch_samples": 64}, space=str(space))
    result = plan(spec, load_catalog(), gpu_types=["h100-sxm"])
    # The file's space was planned, and only it: its two configs.
    assert sorted({b.config for b in result.bills}) == ["8x h100-sxm mb2 ga4 bf16 ckpt:none zero3",
                                                        "8x h100-sxm mb2 ga4 fp8+compile ckpt:none zero3"]
    on = {}
    for b in result.bills:
        if b.offer == "runpod-h100-sxm":
            on["fp8" if "fp8" in b.config else "bf16"] = b
    assert "fp8+compile" in on["fp8"].config
    # Same compute fraction of the bf16 peak, the stated ratio faster (collectives aside: ZeRO-3's
    # are the same for both, so the ratio of compute shares is exactly the ratio).
    compute_bf16 = on["bf16"].scaling_efficiency / on["bf16"].tokens_per_s
    compute_fp8 = on["fp8"].scaling_efficiency / on["fp8"].tokens_per_s
    assert compute_bf16 / compute_fp8 == pytest.approx(FP8_SPEEDUP_OVER_BF16, rel=1e-6)
    assert "bf16 peak x 1.25 for fp8+compile" in on["fp8"].throughput_basis
    said = [a for a in result.assumptions if a.startswith("fp8 configs are planned with torch.compile")]
    assert said and "docs.pytorch.org/ao" in said[0] and "2026-03-25" in said[0]
    # Without compile on, a sweep runs no fp8 (autotune.search.space.restrict): nor does the plan,
    # which says so (it planned fp8 there, a config no sweep of that space launches).
    space.write_text("num_gpus: [8]\nmicro_batch_size: [2]\nprecision: [bf16, fp8]\nzero_stage: [3]\n")
    eager = plan(spec, load_catalog(), gpu_types=["h100-sxm"])
    assert sorted({b.config for b in eager.bills}) == ["8x h100-sxm mb2 ga4 bf16 ckpt:none zero3"]
    assert any(a.startswith("left out, as a sweep of this space leaves them out: precision fp8")
               and "add true to the space's compile" in a for a in eager.assumptions), eager.assumptions


def test_a_compiled_exports_settings_read_back_by_accelerate_and_the_trainer(tmp_path):
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file
    from transformers import HfArgumentParser, TrainingArguments

    from autotune.contract.hardware import installed_version
    from autotune.report.export_accelerate import accelerate_config
    from autotune.report.export_launch import settings_env
    from autotune.report.hf_trainer import trainer_flags

    cfg = TrialConfig(compile=True, num_gpus=2, precision="bf16")
    path = tmp_path / "accelerate_config.yaml"
    path.write_text(yaml.safe_dump(accelerate_config(cfg)))
    assert load_config_from_file(str(path)).dynamo_config["dynamo_backend"] == "INDUCTOR"
    eager = tmp_path / "eager.yaml"
    eager.write_text(yaml.safe_dump(accelerate_config(cfg.model_copy(update={"compile": False}))))
    assert not load_config_from_file(str(eager)).dynamo_config
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path / "out"), *trainer_flags(cfg.model_copy(update={"precision": "fp32"}),
                                                             installed_version("transformers"))])
    assert args.torch_compile is True
    assert ("AUTOTUNE_COMPILE", "1") in settings_env(cfg)
