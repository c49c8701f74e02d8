"""Which trial `autotune export` writes out, resolved against a report: the pick (cheapest,
fastest or a trial number) and the offer, and the names of the files it writes.

    plan = plan_export(doc, trials_by_number, pick="cheapest", offer=None)   # UserError if it cannot
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from autotune.contract import Launcher, TrialConfig
from autotune.errors import UserError, did_you_mean
from autotune.record import TrialRecord

ACCELERATE_CONFIG = "accelerate_config.yaml"
DEEPSPEED_CONFIG = "ds_config.json"
LAUNCH_SCRIPT = "launch.sh"
TRIAL_CONFIG = "trial_config.json"
BILL_MD = "bill.md"
BILL_JSON = "bill.json"


@dataclass
class ExportPlan:
    study: str
    trial: int
    pick: str
    cfg: TrialConfig
    option: dict[str, Any] | None  # the report's OptionRow; None when the trial was not priced
    trial_row: dict[str, Any]
    catalog_note: str | None
    launcher: Launcher
    target: str = "script"  # EXPORT_TARGETS: your own training script, or Hugging Face Trainer
    python: str = sys.executable  # launch.sh's default interpreter: the one that exported it
    # hf-trainer: the version Trainer's flags are written for, installed where the export runs
    # (autotune.report.hf_trainer.checkpointing_flags); None when not installed.
    transformers_version: str | None = None
    # The report's memory-headroom note on this trial as a pick (autotune.report.picks.with_headroom):
    # bill.md repeats it.
    headroom_note: str | None = None

    @property
    def label(self) -> str:
        """"trial 5 (cheapest)", or "trial 5" where the pick named the trial by its number."""
        return f"trial {self.trial}" + ("" if self.pick == str(self.trial) else f" ({self.pick})")


# What `export --for` writes: files for your own training script, or for Hugging Face Trainer.
EXPORT_TARGETS = ("script", "hf-trainer")


def plan_export(doc: dict[str, Any], trials_by_number: dict[int, Any], pick: str,
                offer: str | None = None, launcher: Launcher | None = None,
                target: str = "script") -> ExportPlan:
    """Resolve `pick` (cheapest | fastest | a trial number) and `offer` against a report."""
    options = doc["options"]
    if offer is not None:
        known = sorted({o["offer"] for o in options})
        if offer not in known:
            if not known:
                raise UserError(f"--offer '{offer}': no trial of study '{doc['study']}' is priced yet",
                                fix="run autotune sweep first, or check --study and --storage")
            raise UserError(f"--offer '{offer}': no completed trial is priced on it"
                            f"{did_you_mean(offer, known)}", fix=f"use one of: {', '.join(known)}")
        options = [o for o in options if o["offer"] == offer]
    p = pick.strip().lower()
    option: dict[str, Any] | None
    if p in ("cheapest", "fastest"):
        feasible = [o for o in options if o["feasible"]]
        if not feasible:
            raise UserError(f"--pick {p}: {_no_pick_text(doc, options)}", fix=_no_pick_fix(doc, options))
        option, note = _recommended(doc, feasible, "cost" if p == "cheapest" else "time")
        number = option["trial"]
    else:
        try:
            number = int(p)
        except ValueError:
            raise UserError(f"--pick '{pick}' is not cheapest, fastest or a trial number",
                            fix="e.g. --pick cheapest, --pick fastest or --pick 12") from None
        row = next((t for t in doc["trials"] if t["number"] == number), None)
        if row is None:
            numbers = [t["number"] for t in doc["trials"]]
            raise UserError(f"--pick {number}: study '{doc['study']}' has no trial {number}",
                            fix=f"use a trial number from {min(numbers)} to {max(numbers)} (autotune report)"
                            if numbers else "run autotune sweep first, or check --study and --storage")
        if row["state"] != "COMPLETE":
            raise UserError(f"--pick {number}: trial {number} did not complete ({row['state']}, "
                            f"{row['status']}): there is no measured config to export",
                            fix="pick a completed trial (autotune report lists them)")
        # A config's options are named by its first run; a later run of it (a re-measurement)
        # is priced by them too, on all its runs.
        mine = [o for o in options if o["trial"] == number or number in (o.get("runs") or ())]
        if offer is not None and not mine:
            raise UserError(f"--pick {number} --offer {offer}: trial {number} is not priced on that offer",
                            fix="drop --offer to take the trial's cheapest offer")
        option = min(mine, key=lambda o: (o["usd"], o["hours"]), default=None)
        note = _headroom_note(doc["notes"], option["trial"] if option is not None else number)
    row = next(t for t in doc["trials"] if t["number"] == number)
    try:
        cfg = TrialRecord.of(trials_by_number[number]).trial_config()
    except ValueError as exc:
        raise UserError(f"trial {number}: its stored config is unreadable ({type(exc).__name__})",
                        fix="re-run the trial with this version of autotune") from None
    transformers_version = None
    if target == "hf-trainer":
        from autotune.contract.hardware import installed_version
        from autotune.report.hf_trainer import check_trainer_export

        transformers_version = installed_version("transformers")
        launcher = check_trainer_export(cfg, launcher, transformers_version)
    return ExportPlan(study=doc["study"], trial=number, pick=p, cfg=cfg, option=option, trial_row=row,
                      catalog_note=doc.get("catalog_note"), launcher=launcher or cfg.launcher,
                      target=target, transformers_version=transformers_version, headroom_note=note)


def _no_pick_text(doc: dict[str, Any], options: list[dict[str, Any]]) -> str:
    """Why nothing can be picked, in the report's words (autotune.report.labels.no_option_text);
    under limits, how near the nearest option comes (autotune.report.limits_miss)."""
    from autotune.report.labels import no_option_text

    if not options:
        return no_option_text(doc)
    from autotune.report.labels import limits_set
    from autotune.report.limits_miss import limits_miss

    lim = doc["limits"]
    figures, _ = limits_miss(options, lim["max_usd"], lim["deadline_hours"])
    return f"no option meets the limits ({limits_set(lim['max_usd'], lim['deadline_hours'])}): {figures}"


def _no_pick_fix(doc: dict[str, Any], options: list[dict[str, Any]]) -> str:
    if options:
        from autotune.report.limits_miss import limits_miss

        lim = doc["limits"]
        return f"{limits_miss(options, lim['max_usd'], lim['deadline_hours'])[1]}; or pick a trial number"
    if doc.get("offer_filter"):
        return "leave out --provider / --region, or pick a trial number"
    return "run more trials (autotune sweep), or pick a trial number"


def _recommended(doc: dict[str, Any], feasible: list[dict[str, Any]],
                 by: Literal["cost", "time"]) -> tuple[dict[str, Any], str | None]:
    """The option the report recommends by `by` among `feasible` (one offer's, with --offer),
    and its headroom note, by the report's own rule (autotune.report.picks.recommend, on the
    trial rows' memory_fit)."""
    from autotune.report.picks import recommend
    from autotune.report.schema import MemoryFitRow, OptionRow

    rows = [OptionRow.model_validate(o) for o in feasible]
    fits = {t["number"]: MemoryFitRow(**t["memory_fit"]) for t in doc["trials"] if t.get("memory_fit")}
    chosen, note = recommend(rows, fits, by)
    assert chosen is not None  # rows is not empty
    return feasible[rows.index(chosen)], note


def _headroom_note(notes: list[str], number: int) -> str | None:
    """The report's headroom note on trial `number` as a pick, by cost or by time."""
    from autotune.report.picks import headroom_note_start

    starts = (f"{headroom_note_start('cost')}{number} ", f"{headroom_note_start('time')}{number} ")
    return next((n for n in notes if n.startswith(starts)), None)
