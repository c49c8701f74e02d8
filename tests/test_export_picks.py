"""`autotune export` on a study as a user has it after a short sweep: a pick by trial number
that re-measured another trial's config, a --launcher other than the trial's, and the memory
a bill says the runs fit under.

The sweep is the real sweep loop with a TrialRunner that measures nothing (the seam
tests/test_fit.py uses): its tokens/s grow with the micro-batch."""

from __future__ import annotations

import optuna
import pytest

from autotune.contract import GPTShape, GPTWorkload, Launcher, TrialResult, TrialStatus
from autotune.contract.result import MemorySource
from autotune.spec import SweepSpec

SHAPE = GPTShape(n_layers=1, d_model=64, n_heads=2, vocab_size=512, max_seq_len=64)


def _runner(cfg, trial_dir, on_start=None) -> TrialResult:
    tps = 1000.0 * cfg.micro_batch_size / (cfg.micro_batch_size + 2) * (1.1 if cfg.num_gpus == 1 else 1.5)
    return TrialResult(status=TrialStatus.ok, tokens_per_s=tps, wall_s=5.0, world_size=cfg.num_gpus,
                       peak_mem_bytes=400 * 2**20, peak_mem_source=MemorySource.host_rss)


def _study(tmp_path, limit: int | None = None):
    """(study, report document, trials by number) of a 4-trial sweep over 2 x 2 configs; its
    last trials re-measure the leaders. `limit`: the spec's memory limit per rank."""
    from autotune.report.build import build_report
    from autotune.search.study import DIRECTIONS
    from autotune.search.sweep import run_sweep

    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1, 2]\nmicro_batch_size: [2, 4]\nprecision: [fp32]\ncheckpointing: [none]\n")
    spec = SweepSpec.model_validate(dict(workload=GPTWorkload(preset=None, shape=SHAPE), seq_len=64,
                                         space=str(space), budget=dict(trials=4),
                                         memory=dict(limit_bytes_per_rank=limit)))
    study = optuna.create_study(directions=DIRECTIONS, sampler=optuna.samplers.TPESampler(seed=0))
    run_sweep(spec, study, 4, tmp_path / "runs", runner=_runner)
    return study, build_report(study).model_dump(mode="json"), {t.number: t for t in study.get_trials()}


def test_a_trial_that_re_measured_a_config_exports_with_that_configs_bill(tmp_path):
    """`--pick N` for a trial that re-measured trial M's config: the config is priced (the
    report's option for it rests on both runs), so its bill is that option's. Before, bill.md
    said 'Not priced: no catalog offer matched this trial's hardware' and the terminal
    'exported trial N (not priced)', of a trial the report priced."""
    from autotune.report.export import plan_export, render

    study, doc, trials = _study(tmp_path)
    repeat = next(t for t in doc["trials"] if t["repeat_of"] is not None)
    option = next(o for o in doc["options"] if repeat["number"] in o["runs"] and o["pareto"])
    assert option["trial"] != repeat["number"]  # the option is named by the config's first run
    plan = plan_export(doc, trials, str(repeat["number"]))
    assert plan.trial == repeat["number"] and plan.option is not None
    assert plan.option["usd"] == min(o["usd"] for o in doc["options"] if repeat["number"] in o["runs"])
    bill = render(plan)["bill.md"]
    assert "Not priced" not in bill, bill
    assert f"Projected bill on **{plan.option['offer']}**" in bill, bill
    runs = ", ".join(map(str, option["runs"]))
    assert f"this config's {len(option['runs'])} runs (trials {runs})" in bill, bill


def test_a_launcher_other_than_the_trials_is_the_one_the_files_name(tmp_path):
    """`--launcher accelerate` over a torchrun trial: launch.sh runs accelerate, and the config
    line of launch.sh, bill.md and accelerate_config.yaml says so, with the trial's own. Before,
    all three said 'launcher torchrun' above a script that launches accelerate."""
    from autotune.report.export import plan_export, render

    study, doc, trials = _study(tmp_path)
    plan = plan_export(doc, trials, "cheapest", launcher=Launcher.accelerate)
    assert plan.cfg.launcher is Launcher.torchrun
    files = render(plan)
    assert "-m accelerate.commands.launch" in files["launch.sh"]
    said = "launcher accelerate (the trial ran under torchrun)"
    for name in ("launch.sh", "bill.md", "accelerate_config.yaml"):
        assert said in files[name] and "launcher torchrun" not in files[name], (name, files[name])
    same = render(plan_export(doc, trials, "cheapest", launcher=Launcher.torchrun))
    assert "launcher torchrun," in same["bill.md"] or "launcher torchrun." in same["bill.md"]
    assert "the trial ran under" not in same["bill.md"]


@pytest.mark.parametrize("limit", [None, 2**30])
def test_the_memory_a_bill_names_is_the_machines_unless_the_spec_set_a_limit(tmp_path, limit):
    """Without a memory limit in the spec, the sweep's prescreen holds each trial to the
    machine's own memory: the report names it as that (host RAM / n rank(s) on CPU) and bill.md
    says so. Before, the report called it the 'per-rank limit of the sweep' and bill.md 'the
    memory limit 23.5 GiB per rank', a limit nobody set. A spec's limit keeps its name."""
    from autotune.report.export import plan_export, render

    study, doc, trials = _study(tmp_path, limit)
    plan = plan_export(doc, trials, "cheapest")
    row, ranks = plan.trial_row, plan.cfg.num_gpus
    bill = render(plan)["bill.md"]
    assert row["memory_fit"] is not None, row
    if limit is None:
        assert row["mem_capacity_source"] == f"host RAM / {ranks} rank(s)", row
        assert f"per rank (the machine's own: host RAM / {ranks} rank(s)); one more run" in bill, bill
    else:
        assert (row["mem_capacity_source"], row["mem_capacity_bytes"]) == ("per-rank limit of the sweep", limit)
        assert "the memory limit 1.0 GiB per rank; one more run" in bill and "machine's own" not in bill, bill


@pytest.mark.parametrize("below", ["max_usd", "deadline_hours", "both"])
def test_limits_below_every_option_name_the_nearest_and_the_flag_value_that_lets_it_in(tmp_path, below):
    """`export --pick cheapest` (and the report's note) under a --max-usd / --deadline-hours below
    every option: the cheapest option's dollars, the soonest's hours and the flag value to
    give, which then lets that option in. Before, export said only 'no option meets the
    budget/deadline' and 'relax --max-usd / --deadline-hours', the report's note only the limits."""
    import re

    from autotune.errors import UserError
    from autotune.format import fmt_hours, fmt_usd
    from autotune.report.build import build_report
    from autotune.report.export import plan_export

    study, doc, trials = _study(tmp_path)
    cheapest = min(doc["options"], key=lambda o: (o["usd"], o["hours"]))
    soonest = min(doc["options"], key=lambda o: (o["hours"], o["usd"]))
    limits = {"max_usd": cheapest["usd"] / 2, "deadline_hours": soonest["hours"] / 2}
    if below != "both":
        limits = {below: limits[below]}
    low = build_report(study, **limits).model_dump(mode="json")
    with pytest.raises(UserError) as exc:
        plan_export(low, trials, "cheapest")
    said = str(exc.value)
    note = next(n for n in low["notes"] if n.startswith("no option meets the limits"))
    for text in (said, note):
        if "max_usd" in limits:
            assert f"the cheapest option{' (also the soonest)' if below == 'both' else ''}, trial " \
                   f"{cheapest['trial']} on {cheapest['offer']}, costs {fmt_usd(cheapest['usd'])}" in text, text
        if below == "deadline_hours":
            assert f"the soonest option, trial {soonest['trial']} on {soonest['offer']}, takes " \
                   f"{fmt_hours(soonest['hours'], days_beside=True)}" in text, text
    raised = {flag.replace("-", "_"): float(v) for flag, v in re.findall(r"--(max-usd|deadline-hours) (?:to )?([0-9.]+)", said)}
    assert set(raised) == set(limits), said
    plan = plan_export(build_report(study, **raised).model_dump(mode="json"), trials, "cheapest")
    assert plan.option is not None and plan.option["usd"] == cheapest["usd"]


def test_with_both_limits_the_flag_named_is_the_one_that_alone_lets_an_option_in():
    """Budget and deadline both set, no option within both: where one limit alone keeps out
    the nearest option, that flag is named (with the value), else both."""
    from autotune.report.limits_miss import limits_miss

    options = [dict(trial=1, offer="a", usd=10.0, hours=50.0), dict(trial=2, offer="b", usd=30.0, hours=5.0)]
    figures, fix = limits_miss(options, max_usd=20.0, deadline_hours=10.0)  # 1 over time, 2 over budget
    assert "within the deadline the cheapest option, trial 2 on b, costs $30.00" in figures, figures
    assert "within the budget the soonest option, trial 1 on a, takes 50.0 h" in figures, figures
    assert fix == ("raise --max-usd to 30.00 or more (the deadline kept), or raise --deadline-hours to 50.0 "
                   "or more (the budget kept)")
    figures, fix = limits_miss(options, max_usd=5.0, deadline_hours=1.0)
    assert "the soonest, trial 2 on b, takes 5.0 h and costs $30.00" in figures, figures
    assert fix == "raise both, e.g. --max-usd 10.00 --deadline-hours 50.0"
    # rounded up, never below the figure: $1.234 needs 1.24, 0.123 h needs 0.13
    assert limits_miss([dict(trial=0, offer="c", usd=1.234, hours=0.123)], 1.0, None)[1] == \
        "raise --max-usd to 1.24 or more"
    assert limits_miss([dict(trial=0, offer="c", usd=1.234, hours=0.123)], None, 0.1)[1] == \
        "raise --deadline-hours to 0.13 or more"
