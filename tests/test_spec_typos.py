"""A misspelt key in a spec or search-space file: exit code 2, the field named, the closest
allowed key suggested ("did you mean 'seq_len'?"), and nothing written (no study, no runs)."""

from __future__ import annotations

import pytest

TYPOS = {
    "top level": ("seq_lenn: 256\n", "seq_lenn", "seq_len"),
    "nested section": ("trial: {warmup_step: 3}\n", "trial.warmup_step", "warmup_steps"),
    "union member": ("workload: {kind: gpt, presett: mini}\n", "workload.presett", "preset"),
    "another union member": ("workload: {kind: hf, model_type: llama, config_override: {}}\n",
                             "workload.config_override", "config_overrides"),
    "budget": ("budget: {trails: 3}\n", "budget.trails", "trials"),
}


def _nothing_written(folder) -> None:
    assert not (folder / "autotune.db").exists(), "the study must stay untouched"
    assert not (folder / "autotune_runs").exists(), "no runs folder for a spec that fails"


@pytest.mark.parametrize("case", list(TYPOS))
def test_spec_typo_suggests_the_field(tmp_path, run_cli, case):
    text, field, suggestion = TYPOS[case]
    (tmp_path / "bad.yaml").write_text(text)
    p = run_cli("sweep", "bad.yaml")
    assert p.returncode == 2, p.stderr
    assert "bad.yaml" in p.stderr and f"`{field}`" in p.stderr
    assert f"did you mean '{suggestion}'?" in p.stderr
    assert "Traceback" not in p.stderr
    _nothing_written(tmp_path)


def test_no_suggestion_when_nothing_is_close(tmp_path, run_cli):
    (tmp_path / "bad.yaml").write_text("zzzzzz: 1\n")
    p = run_cli("sweep", "bad.yaml")
    assert p.returncode == 2 and "`zzzzzz`" in p.stderr
    assert "did you mean" not in p.stderr
    _nothing_written(tmp_path)


def test_space_typo_suggests_the_dimension(tmp_path, run_cli):
    (tmp_path / "space.yaml").write_text("micro_batch: [1, 2]\n")
    (tmp_path / "bad.yaml").write_text("space: space.yaml\n")
    p = run_cli("sweep", "bad.yaml")
    assert p.returncode == 2, p.stderr
    assert "space.yaml" in p.stderr and "`micro_batch`" in p.stderr
    assert "did you mean 'micro_batch_size'?" in p.stderr
    _nothing_written(tmp_path)


def test_suggestion_uses_an_alias():
    # No spec model has an alias today; the rule for when one does: suggest the key the file
    # may hold (the alias, and the name too only when the model accepts it).
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from autotune.errors import format_validation_error

    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        max_steps: int = Field(default=1, alias="max-steps")

    class Outer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        inner: list[Inner] = []

    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"inner": [{"max-step": 2}]})
    text = format_validation_error("f.yaml", info.value, Outer)
    assert "field `inner.0.max-step`" in text and "did you mean 'max-steps'?" in text


CHOICE_TYPOS = {
    "enum in a section": ("trial: {launcher: torchrn}\n", None, "trial.launcher", "torchrun"),
    "union tag": ("workload: {kind: gtp}\n", None, "workload", "gpt"),
    "space choice": ("space: space.yaml\n", "fsdp: [none, full-shard]\n", "fsdp.1", "full_shard"),
    "space precision": ("space: space.yaml\n", "precision: [bf61]\n", "precision.0", "bf16"),
    "space name": ("space: defualt\n", None, None, "default"),
}


@pytest.mark.parametrize("case", list(CHOICE_TYPOS))
def test_misspelt_choice_suggests_the_value(tmp_path, run_cli, case):
    # A mistyped key was suggested; a mistyped value (an enum, a Literal, a union's tag, a
    # shipped space's name) only listed the choices.
    text, space, field, suggestion = CHOICE_TYPOS[case]
    (tmp_path / "bad.yaml").write_text(text)
    if space:
        (tmp_path / "space.yaml").write_text(space)
    p = run_cli("sweep", "bad.yaml")
    assert p.returncode == 2, p.stderr
    assert field is None or f"`{field}`" in p.stderr, p.stderr
    assert f"did you mean '{suggestion}'?" in p.stderr, p.stderr
    assert p.stderr.count("To fix:") == 1 and "Traceback" not in p.stderr
    _nothing_written(tmp_path)


def test_misspelt_trial_config_field_suggests_the_field(tmp_path, run_cli):
    (tmp_path / "c.json").write_text('{"precison": "bf16"}')
    p = run_cli("trial", "c.json")
    assert p.returncode == 2, p.stderr
    assert "`precison`" in p.stderr and "did you mean 'precision'?" in p.stderr, p.stderr
    assert "docs/spec_reference.md" in p.stderr
    assert not (tmp_path / "autotune_runs").exists()
