"""A config is measured once per hardware unless re-measured on purpose: keys, claims, reuse.

    key = config_key(cfg, hw.key())
    src = wait_for_measurement(trial, key, note)     # None: this trial holds the claim, measure
    result, score = reuse_measurement(trial, src)    # else: copy the finished trial's record

A trial first looks for a finished trial with the same `config_key` (config without its seed,
plus the hardware key) and reuses it (record, constraints; `reused_from`). Otherwise it must
win an atomic claim on the key (`autotune.run.storage.claim`) before launching; a trial that
loses waits for the winner and reuses its result, or claims the next generation if the winner
failed. Deliberate repeats (before recommending: autotune.search.racing) do not come here:
they are enqueued as repeats of a config and measured again.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Callable

from autotune.contract import HardwareFingerprint, TrialConfig, TrialResult
from autotune.record import ScoreRecord, TrialRecord
from autotune.run.processes import owner_attrs, recover_dead_trials
from autotune.run.storage import claim, claim_owner

# Seconds between looks at the study while waiting for another worker's measurement.
WAIT_POLL_S = 1.0


# Fields TrialConfig gained after studies were recorded, with the value older records read
# as: at that value a config keeps the key it had before, so a resumed study reuses them.
# min_measure_s: its default floor never lengthens the window of a model whose steps take
# seconds, so configs measured before it existed keep their keys. compile: eager, as every
# trial ran before it existed.
ADDED_LATER = {"fsdp": "none", "min_measure_s": TrialConfig.model_fields["min_measure_s"].default,
               "compile": False}


def config_key(cfg: TrialConfig, hardware_key: str) -> str:
    """Identity of a measurement: the config without its seed, on one kind of hardware."""
    # The device peak is bookkeeping for MFU (from the catalog), not part of what is measured.
    doc = cfg.model_dump(mode="json", exclude={"seed", "device_peak_flops"})
    for name, before in ADDED_LATER.items():
        if doc.get(name) == before:
            del doc[name]
    text = json.dumps({"config": doc, "hardware": hardware_key}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def key_on(rec: TrialRecord, hw: HardwareFingerprint) -> str | None:
    """The config key of a record's measurement on this hardware; None when it was measured on
    other hardware. A record written before the hardware key named counts and versions is
    keyed again when its stored fingerprint matches this machine (`TrialRecord.on`)."""
    if rec.hardware == hw.key():
        return rec.config_key
    if rec.config is None or not rec.on(hw):
        return None
    try:
        return config_key(rec.trial_config(), hw.key())
    except ValueError:  # a config this version no longer reads: not comparable
        return None


def finished_same_key(study, key: str, number: int, hw: HardwareFingerprint | None = None):
    """The first finished trial (COMPLETE or PRUNED) that measured `key`, other than `number`
    (`hw`: this machine, so that records of older studies are keyed again, see `key_on`)."""
    from optuna.trial import TrialState

    # A prescreened trial measured nothing: a later proposal that the (by then calibrated)
    # prescreen lets through runs for real instead of reusing it.
    done = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        rec = TrialRecord.of(t)
        if t.number == number or rec.status in (None, "prescreened"):
            continue
        if (key_on(rec, hw) if hw is not None else rec.config_key) == key:
            done.append(t)
    return min(done, key=lambda t: t.number, default=None)


def wait_for_measurement(trial, key: str, note: Callable[[str], None] | None = None,
                         hw: HardwareFingerprint | None = None):
    """None: this trial holds the claim on `key` and must measure. Otherwise the finished
    trial (COMPLETE or PRUNED) whose measurement of the same config it reuses."""
    import optuna
    from optuna.trial import TrialState

    study = trial.study
    storage = study._storage
    gen, waited_for_owner_s, said = 0, 0.0, False
    while True:
        src = finished_same_key(study, key, trial.number, hw)
        if src is not None:
            return src
        name = f"{study.study_name}/{key}/{gen}"
        if claim(storage, name, {"trial": trial.number, **owner_attrs()}):
            TrialRecord.write(trial, claim=name)
            return None
        owner = claim_owner(storage, name) or {}
        if "trial" not in owner:
            # The winner has not written its name yet, or died in between: give it a moment.
            waited_for_owner_s += WAIT_POLL_S
            if waited_for_owner_s > 30:
                gen += 1
            time.sleep(WAIT_POLL_S)
            continue
        owner_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, owner["trial"])
        state = storage.get_trial(owner_id).state
        if state in (TrialState.COMPLETE, TrialState.PRUNED):
            return storage.get_trial(owner_id)
        if state is TrialState.FAIL:
            gen += 1  # the measurement failed (crash, dead machine): the next claim may retry it
            continue
        if not said and note:
            note(f"trial {trial.number}: same config as running trial {owner['trial']}; waiting "
                 "to reuse its measurement")
            said = True
        recover_dead_trials(study)
        optuna.storages.fail_stale_trials(study)
        time.sleep(WAIT_POLL_S)


def reuse_measurement(trial, src) -> tuple[TrialResult, ScoreRecord | None]:
    """Copy a finished trial's measurement into `trial`: its record's measurement fields
    (autotune.record.TrialRecord.measurement) and its constraints."""
    rec = TrialRecord.of(src)
    TrialRecord.write(trial, **rec.measurement(), reused_from=src.number, search_gpu_hours=0.0,
                      search_usd=0.0)
    for name, value in src.constraints.items():
        trial.set_constraint(name, value)
    return rec.result(), rec.score


