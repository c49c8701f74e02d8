"""A study measures one training run: a later sweep of it with another workload, sequence
length, target, batch policy or space is refused before any trial (autotune.search.identity).
Before, a changed seq_len was swept into the same study and ranked against the old trials
(export handed back the old seq_len), and a changed space crashed in Optuna's sampler
("CategoricalDistribution does not support dynamic value space") after queueing trials."""

from __future__ import annotations

import json

import optuna
import pytest

from autotune.errors import UserError
from autotune.search.identity import IDENTITY_ATTR, check_same_study, describe_changes, study_identity
from autotune.spec import SweepSpec, load_spec
from tests.test_runs_dir import SPACE, SPEC  # the same tiny sweep (study s1)


def _spec(tmp_path, text: str = SPEC, space: str = SPACE) -> SweepSpec:
    (tmp_path / "space.yaml").write_text(space)
    (tmp_path / "spec.yaml").write_text(text)
    return load_spec(tmp_path / "spec.yaml")


def _study(tmp_path):
    return optuna.create_study(study_name="s1", storage=f"sqlite:///{tmp_path / 'db.sqlite'}",
                               directions=["minimize", "minimize"], load_if_exists=True)


def test_the_first_sweep_records_what_the_study_measures_and_later_ones_must_match(tmp_path):
    study = _study(tmp_path)
    spec = _spec(tmp_path)
    check_same_study(study, spec)
    stored = _study(tmp_path).user_attrs[IDENTITY_ATTR]  # read back from the storage
    assert stored == study_identity(spec)
    assert stored["seq_len"] == 32 and stored["space"]["micro_batch_size"] == [1, 2]
    check_same_study(_study(tmp_path), spec)  # the same spec again: a resume
    # What may change: measurement settings, limits, budget.
    check_same_study(_study(tmp_path), _spec(tmp_path, SPEC.replace("timeout_s: 80", "timeout_s: 90")
                                              + "memory: {limit_bytes_per_rank: 400000000}\n"
                                              + "budget: {max_usd: 5}\n"))

    for text, space, words in (
            (SPEC.replace("seq_len: 32", "seq_len: 64"), SPACE, "seq_len 32 -> 64"),
            (SPEC.replace("1.0e7", "2.0e7"), SPACE, "target: tokens 10000000.0 -> 20000000.0"),
            (SPEC.replace("preset: tiny", "preset: mini"), SPACE, "workload: shape"),
            (SPEC, SPACE.replace("[1, 2]", "[1, 2, 4]"), "space: micro_batch_size [1, 2] -> [1, 2, 4]")):
        with pytest.raises(UserError, match="study 's1' was swept with another spec") as err:
            check_same_study(_study(tmp_path), _spec(tmp_path, text, space))
        assert words in str(err.value) and "--study NAME" in str(err.value)
    assert _study(tmp_path).user_attrs[IDENTITY_ATTR] == stored  # a refusal changes nothing


def test_a_study_an_older_autotune_made_is_adopted(tmp_path):
    study = _study(tmp_path)
    assert IDENTITY_ATTR not in study.user_attrs
    spec = _spec(tmp_path)
    check_same_study(study, spec)
    assert _study(tmp_path).user_attrs[IDENTITY_ATTR] == study_identity(spec)


def test_an_hf_config_is_compared_by_content_not_path(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    spec_a = _spec(tmp_path / "a", SPEC.replace("{kind: gpt, preset: tiny}", "{kind: hf, config_path: config.json}"))
    spec_b = _spec(tmp_path / "b", SPEC.replace("{kind: gpt, preset: tiny}", "{kind: hf, config_path: config.json}"))
    assert spec_a.workload.config_path != spec_b.workload.config_path
    assert study_identity(spec_a) == study_identity(spec_b)  # another machine's copy of one config
    (tmp_path / "b" / "config.json").write_text(json.dumps({**cfg, "hidden_size": 128}))
    changes = describe_changes(study_identity(spec_a), study_identity(spec_b))
    assert len(changes) == 1 and changes[0].startswith("workload: config_path ")


@pytest.mark.e2e
def test_a_sweep_resumed_with_another_spec_exits_2_and_leaves_the_study_as_it_was(tmp_path, run_cli):
    _spec(tmp_path)
    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    db = tmp_path / "autotune.db"
    # The second baseline stays queued for the next sweep: shown so, not as a config of Nones.
    report = run_cli("report", "--study", "s1")
    assert report.returncode == 0, report.stderr
    assert "queued for the next sweep" in report.stdout and "None" not in report.stdout, report.stdout
    trials = optuna.load_study(study_name="s1", storage=f"sqlite:///{db}").trials
    folders = sorted(p.name for p in (tmp_path / "autotune_runs" / "s1").iterdir())

    # A longer sequence, then a wider space (the one Optuna's sampler crashed on).
    (tmp_path / "spec.yaml").write_text(SPEC.replace("seq_len: 32", "seq_len: 64"))
    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert "seq_len 32 -> 64" in p.stderr and "To fix:" in p.stderr
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "space.yaml").write_text(SPACE.replace("[1, 2]", "[1, 2, 4]"))
    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert "micro_batch_size [1, 2] -> [1, 2, 4]" in p.stderr
    after = optuna.load_study(study_name="s1", storage=f"sqlite:///{db}").trials
    assert [(t.number, t.state) for t in after] == [(t.number, t.state) for t in trials]
    assert sorted(p.name for p in (tmp_path / "autotune_runs" / "s1").iterdir()) == folders

    # The same spec again resumes, and the new spec sweeps in a study of its own.
    (tmp_path / "space.yaml").write_text(SPACE)
    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    (tmp_path / "spec.yaml").write_text(SPEC.replace("seq_len: 32", "seq_len: 64"))
    p = run_cli("sweep", "spec.yaml", "--trials", "1", "--study", "s1-seq64")
    assert p.returncode == 0, p.stdout + p.stderr
