"""The Python API (autotune.sweep / estimate / cost) for notebooks and scripts: the same
answers as the commands, a real sweep from Python, and `import autotune` staying light."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autotune
from autotune.errors import UserError

REPO = Path(__file__).resolve().parent.parent


def test_import_autotune_loads_no_torch_and_nothing_heavy():
    code = ("import sys, autotune\n"
            "light = sorted(m for m in ('torch', 'optuna', 'pydantic', 'deepspeed') if m in sys.modules)\n"
            "autotune.estimate(model='tiny', seq_len=64)\n"
            "autotune.cost(gpu='h100-sxm', mfu=0.4, params=1e9, target_tokens=1e10)\n"
            "heavy = sorted(m for m in ('torch', 'deepspeed', 'accelerate') if m in sys.modules)\n"
            "print(light, heavy)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert p.stdout.strip() == "[] []"


def test_estimate_and_cost_answer_as_the_commands_do(cli):
    est = autotune.estimate(model="7b", seq_len=4096, micro_batch=2, zero_stage=2, dp=8, gpu="a100-80gb")
    code, out, err = cli("estimate", "--model", "7b", "--seq-len", "4096", "--micro-batch", "2",
                         "--zero-stage", "2", "--dp", "8", "--gpu", "a100-80gb", "--json")
    assert code == 0, err
    assert est == json.loads(out) and est["total_bytes"] > 0
    # 7B with ZeRO-2 over 8 ranks needs ~63 GB a rank: it fits an 80 GB card, margin kept
    # (a 40 GB card does not: tests/test_estimate.py).
    assert est["fits"] is True
    bills = autotune.cost(gpu="h100-sxm", mfu=0.4, params=7e9, target_tokens=1e11, gpus=8,
                          global_batch_tokens=4e6, zero_stage=1)
    code, out, err = cli("cost", "--gpu", "h100-sxm", "--mfu", "0.4", "--params", "7e9", "--target-tokens",
                         "1e11", "--gpus", "8", "--global-batch-tokens", "4e6", "--zero-stage", "1", "--json")
    assert code == 0, err
    assert bills.as_dicts() == json.loads(out) and bills.cheapest == json.loads(out)[0]
    with pytest.raises(UserError, match="exactly one of --tokens-per-s"):
        autotune.cost(gpu="h100-sxm", target_tokens=1e11)


SPACE = """
num_gpus: [1]
micro_batch_size: [1, 2]
precision: [fp32]
checkpointing: [none]
"""


@pytest.mark.e2e
def test_sweep_from_python_returns_the_pick_and_exports_it(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    spec = {"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32, "target": {"tokens": 1e7},
            "space": str(tmp_path / "space.yaml"),
            "trial": {"warmup_steps": 1, "measure_steps": 2, "max_measure_steps": 2, "timeout_s": 180}}
    seen = []
    result = autotune.sweep(spec, trials=1, study="py", storage=f"sqlite:///{tmp_path}/s.db",
                            runs_dir=tmp_path / "runs", progress=False, on_trial=seen.append)
    assert result.trials_run == 1 and len(seen) >= 1 and result.study_name == "py"
    # The whole `autotune report --json` document, its storage too (it was None here).
    assert result.report["storage"] == result.storage == f"sqlite:///{tmp_path}/s.db"
    pick = result.pick
    assert pick is not None and pick["usd"] > 0 and pick["offer"] == "aws-c7i-ondemand"
    assert result.pareto and result.report["trials"][pick["trial"]]["status"] == "ok"
    assert f"Pick: trial {pick['trial']} on aws-c7i-ondemand" in str(result)
    files = result.export(tmp_path / "launch")
    assert (tmp_path / "launch" / "launch.sh") in files
    assert json.loads((tmp_path / "launch" / "bill.json").read_text())["trial"] == pick["trial"]
    # A trial number as Python writes it (it raised AttributeError: 'int' object has no attribute 'strip').
    result.export(tmp_path / "by_number", pick=pick["trial"], target="hf-trainer")
    assert json.loads((tmp_path / "by_number" / "bill.json").read_text())["trial"] == pick["trial"]
    assert (tmp_path / "by_number" / "trainer_flags.txt").is_file()
    with pytest.raises(UserError, match="seq_len"):
        autotune.sweep({**spec, "seq_len": 0}, trials=1, storage=f"sqlite:///{tmp_path}/s.db")


@pytest.mark.e2e
def test_an_on_trial_that_raises_stops_the_sweep_and_keeps_the_trial_it_reported(tmp_path):
    """A caller's on_trial that raises (a bug in it, a full disk under its log) is called while
    the trial it reports is still RUNNING. Before, Optuna then failed that trial, measured as it
    was; now the trial is recorded as measured and the error reaches the caller after it."""
    import optuna
    from optuna.trial import TrialState

    from autotune.record import TrialRecord

    (tmp_path / "space.yaml").write_text(SPACE)
    spec = {"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32, "target": {"tokens": 1e7},
            "space": str(tmp_path / "space.yaml"),
            "trial": {"warmup_steps": 1, "measure_steps": 2, "max_measure_steps": 2, "timeout_s": 180}}
    url = f"sqlite:///{tmp_path}/s.db"

    def broken(outcome):
        raise RuntimeError("the caller's on_trial broke")

    with pytest.raises(RuntimeError, match="the caller's on_trial broke"):
        autotune.sweep(spec, trials=2, study="cb", storage=url, runs_dir=tmp_path / "runs", progress=False,
                       on_trial=broken)
    trials = optuna.load_study(study_name="cb", storage=url).trials
    states = [(t.number, t.state.name, TrialRecord.of(t).status) for t in trials]
    assert trials[0].state is TrialState.COMPLETE and TrialRecord.of(trials[0]).status == "ok", states
    assert all(t.state is TrialState.WAITING for t in trials[1:]), states  # nothing ran after it


def test_a_trial_cut_by_a_signal_is_not_counted_as_measured(tmp_path):
    """A sweep resumed after a SIGTERM (or Ctrl-C twice) cut a trial: its first line said "(2
    trials measured so far)" where one trial had measured and the other was killed before it
    measured anything. A real study in SQLite: one measured trial, one cut, one reused."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from autotune.api.sweep import load, prepare
    from autotune.search.study import open_study

    (tmp_path / "space.yaml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/s.db"
    spec = load({"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32,
                 "space": str(tmp_path / "space.yaml"), "storage": url, "study": "cut"})
    study = open_study(url, "cut")
    dist = {"micro_batch_size": CategoricalDistribution([1, 2])}
    for state, mb, attrs in [(TrialState.COMPLETE, 1, {"status": "ok"}),
                             (TrialState.FAIL, 2, {"status": "interrupted",
                                                   "error": "stopped by SIGTERM (kill, a scheduler or a "
                                                            "container stopping); its processes were killed"}),
                             (TrialState.COMPLETE, 1, {"status": "ok", "reused_from": 0})]:
        study.add_trial(create_trial(state=state, values=[1.0, 2.0] if state is TrialState.COMPLETE else None,
                                     params={"micro_batch_size": mb}, distributions=dist, user_attrs=attrs))
    assert len(optuna.load_study(study_name="cut", storage=url).trials) == 3
    assert prepare(spec, tmp_path / "runs").measured_before == 1


def _examples(text: str) -> list[str]:
    """The estimate / cost statements of a usage example (module docstring, README block), each
    with its continuation lines and without its comment; sweep lines need a spec file: left out."""
    out: list[str] = []
    open_parens = 0
    for line in textwrap.dedent(text).splitlines():
        code = line.split("  #", 1)[0].strip()
        if open_parens:
            out[-1] += " " + code
        elif ("autotune.estimate(" in code or "autotune.cost(" in code or code.startswith(("est[", "bills."))):
            out.append(code)
        else:
            continue
        open_parens += code.count("(") - code.count(")")
    return out


def _usage(text: str) -> str:
    """A docstring's indented usage lines, or the README's "From Python" code block."""
    if "## From Python" in text:
        return text.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    return "\n".join(ln for ln in text.splitlines() if ln.startswith("    "))


@pytest.mark.parametrize("where", ["autotune", "autotune.api", "autotune.api.plan", "README.md"])
def test_the_estimate_and_cost_examples_run_as_written_and_answer(where):
    """A reader copies the example: `autotune.cost(gpu="h100-sxm", mfu=0.4, params=7e9,
    target_tokens=1e11, gpus=8).cheapest` raised "cannot estimate communication for several GPUs
    without the batch" (and without ZeRO the 7B's states fit no 8 x H100 offer: no bill)."""
    import importlib

    text = (REPO / where).read_text() if where.endswith(".md") else importlib.import_module(where).__doc__
    statements = _examples(_usage(text or ""))
    assert any("autotune.estimate(" in s for s in statements) and any("autotune.cost(" in s for s in statements)
    names: dict = {"autotune": autotune}
    for s in statements:
        if "=" in s.split("(", 1)[0]:
            exec(s, names)
            continue
        value = eval(s, names)
        values = value if isinstance(value, tuple) else (value,)
        assert all(v is not None for v in values), f"{where}: {s} gave {value!r}"
        if isinstance(value, autotune.CostResult):
            assert value.bills, f"{where}: {s} priced no offer: {value.skipped[:2]}"


@pytest.mark.parametrize("trials", [0, -1, 2.5, True])
def test_a_sweep_refuses_a_trial_count_that_is_not_one_or_more(tmp_path, trials):
    """`trials=0` ran the spec's budget.trials (8 by default) and `trials=-1` still launched one
    trial (`--trials` takes 1 or more); now each is refused before the storage is created."""
    with pytest.raises(UserError, match=r"trials=.* is not a count of trials to launch") as err:
        autotune.sweep({"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32}, trials=trials,
                       storage=f"sqlite:///{tmp_path}/s.db", runs_dir=tmp_path / "runs", progress=False)
    assert "budget.trials" in err.value.fix
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "runs").exists()


def test_a_spec_dicts_typo_gets_did_you_mean_as_a_spec_files_does(tmp_path):
    from autotune.api.sweep import load

    with pytest.raises(UserError, match=r"field `seqlen`: .*did you mean 'seq_len'\?"):
        load({"workload": {"kind": "gpt", "preset": "tiny"}, "seqlen": 32})
    with pytest.raises(UserError, match=r"field `budget.max_usdd`: .*did you mean 'max_usd'\?"):
        load({"budget": {"max_usdd": 5}})


@pytest.mark.parametrize("kwargs, named", [({"target": "hf"}, "target='hf' is not one of script, hf-trainer"),
                                           ({"launcher": "torchrn"}, "launcher='torchrn' is not one of")])
def test_an_export_with_an_unknown_target_or_launcher_is_refused_before_writing(tmp_path, kwargs, named):
    """`result.export(out, target="hf")` wrote a script export (the target was not applied) and
    launcher="torchrn" raised a bare ValueError; `autotune export` refuses both."""
    from autotune.api.sweep import SweepResult

    result = SweepResult("s", "sqlite:///s.db", 0, None, False, report={}, study=None)
    with pytest.raises(UserError, match=re.escape(named)) as err:
        result.export(tmp_path / "out", **kwargs)
    assert "did you mean" in str(err.value) and not (tmp_path / "out").exists()


def test_autotune_estimate_shows_the_functions_parameters():
    """`autotune.estimate` is the package of analytic models made callable: a notebook's
    `autotune.estimate?` and inspect.signature showed `(*args, **kwargs)`, not its parameters."""
    import inspect

    from autotune.api.plan import estimate

    assert inspect.signature(autotune.estimate) == inspect.signature(estimate)
    assert "seq_len" in inspect.signature(autotune.estimate).parameters
    assert inspect.signature(autotune.cost) == inspect.signature(autotune.api.cost)


def test_the_slot_workers_usage_line_parses_as_the_parent_starts_it():
    """Its docstring's command line had a lone backslash (Python joined its lines) and file
    names the parent no longer writes; now it is the argv `_start` builds, and it parses."""
    import shlex

    from autotune.api import slot_worker

    usage = _usage(slot_worker.__doc__ or "").split("\n\n")[0].replace("\\\n", " ").split("#")[0]
    words = shlex.split(usage)
    assert words[:4] == ["AUTOTUNE_STORAGE=journal:///abs/study.log", "python", "-m", "autotune.api.slot_worker"]
    args = slot_worker.parse_args(words[4:])
    slot, count = slot_worker.slot_from_json(args.slot_json)
    assert (slot.index, slot.devices, count, args.trials, args.alone_reserve) == (0, (0,), 2, 3, 4)
    assert args.others_done is not None and args.summary_json.name == "summary_slot0_x2.json"


@pytest.mark.parametrize("keyword, meant", [("trails", "trials"), ("progres", "progress"), ("on_trail", "on_trial"),
                                            ("runsdir", "runs_dir")])
def test_a_mistyped_keyword_of_sweep_names_the_keyword_meant(tmp_path, keyword, meant):
    """`autotune.sweep(spec, trails=2)` was taken for a spec field and answered "command line:
    field `trails` ... (did you mean 'trial'?)", the spec's section; `progres=False` got no hint."""
    with pytest.raises(UserError, match=rf"sweep\(\) got the keyword '{keyword}'.*did you mean '{meant}'\?"):
        autotune.sweep({"workload": {"kind": "gpt", "preset": "tiny"}}, storage=f"sqlite:///{tmp_path}/s.db",
                       runs_dir=tmp_path / "runs", **{keyword: 2})
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "runs").exists()


COST = dict(gpu="h100-sxm", gpus=8, mfu=0.4, params=7e9, target_tokens=1e11, global_batch_tokens=4e6, zero_stage=1)


@pytest.mark.parametrize("call, kwargs, says", [
    ("estimate", dict(tp=0), "--tp 0: must be greater than 0"),  # was a ZeroDivisionError
    ("estimate", dict(dp=-1), "--dp -1: must be greater than 0"),  # was "--offload none with ..."
    ("estimate", dict(seq_len=2048.5), "--seq-len 2048.5"),
    ("estimate", dict(offload="cpu"), "--offload 'cpu': must be 'none', 'optimizer' or 'optimizer+params'"),
    ("estimate", dict(optimizer="adamm"), "--optimizer 'adamm'"),
    ("cost", dict(gpus=0), "--gpus 0: must be greater than 0"),  # was a ZeroDivisionError
    ("cost", dict(gpus=-8), "--gpus -8"),  # was an answer with no bill
    ("cost", dict(run_gpus=[0]), "--run-gpus [0]: each GPU count must be 1 or more"),
    ("cost", dict(mfu=None, tokens_per_s=-5.0), "--tokens-per-s -5.0"),  # was a bare ValueError
    ("cost", dict(zero_stage=7), "--zero-stage 7"),  # was pydantic's ValidationError for MemoryConfig
    ("cost", dict(checkpoint_interval_hours=0), "--checkpoint-interval-hours 0"),  # was a ZeroDivisionError
    ("cost", dict(checkpoint_gb=-1), "--checkpoint-gb -1"),  # was accepted
    ("cost", dict(gpus=True), "--gpus True: a number or a name, not a truth value"),
])
def test_estimate_and_cost_refuse_a_bad_argument_naming_it_as_its_flag(call, kwargs, says):
    base = dict(model="7b") if call == "estimate" else COST
    with pytest.raises(UserError) as err:
        getattr(autotune, call)(**{**base, **kwargs})
    assert says in str(err.value), str(err.value)


def test_cost_takes_a_single_name_or_count_and_a_number_as_text_as_the_command_does(tmp_path):
    bills = autotune.cost(**COST).as_dicts()
    assert bills
    # A single offer name was iterated letter by letter ("unknown offer 'l'"); a count where a
    # list is taken raised a TypeError; "3200" failed a format.
    one = bills[0]["offer"]
    assert [b["offer"] for b in autotune.cost(**COST, offers=one).as_dicts()] == [one]
    assert autotune.cost(**{**COST, "run_gpus": 8}).as_dicts() == bills
    measured = dict(gpu="h100-sxm", gpus=8, target_tokens=1e11, zero_stage=1)
    assert (autotune.cost(**measured, tokens_per_s="3200").as_dicts()
            == autotune.cost(**measured, tokens_per_s=3200.0).as_dicts())
    # A path object for the model, as a path string is taken (was an AttributeError).
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 512, "intermediate_size": 128}))
    assert autotune.estimate(model=cfg, seq_len=64) == autotune.estimate(model=str(cfg), seq_len=64)


@pytest.mark.parametrize("kwargs, says", [
    (dict(study__name="x"), "keyword study__name: `study` is a value of the spec"),  # was a TypeError
    (dict(seq_len__x=1), "keyword seq_len__x: `seq_len` is a value of the spec"),
    (dict(budget__max_usd=-5), "correct the keyword (budget__max_usd=-5)"),  # was "the option (budget.max_usd=-5)"
])
def test_a_keyword_override_is_refused_in_the_callers_own_words(tmp_path, kwargs, says):
    with pytest.raises(UserError) as err:
        autotune.sweep({"workload": {"kind": "gpt", "preset": "tiny"}, "seq_len": 32}, trials=1,
                       storage=f"sqlite:///{tmp_path}/s.db", runs_dir=tmp_path / "runs", progress=False, **kwargs)
    assert says in str(err.value), str(err.value)
    assert "command line" not in str(err.value)
    assert list(tmp_path.iterdir()) == []
