"""Property-based tests (hypothesis) over what users write: spec files, search spaces, catalogs
and command-line overrides. Any input either loads (and then round-trips unchanged) or ends in
one UserError naming the file or flag and the fix, which the CLI prints as one line with exit
code 2; never another exception (a traceback)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.errors import UserError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Scalars a YAML file can hold, hostile ones included.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**12, max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "..", "../x", "a/b", "tiny", "gpt", "hf", "fp32",
                                           "bf16", "none", "full", "default", "x\ny", "1e9", "-1"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)


def _write(tmp_path: Path, name: str, data) -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, allow_unicode=True))
    return p


def _user_error_or(fn, *args):
    """fn(*args), or None when it raised a UserError with a fix (the CLI's exit 2)."""
    try:
        return fn(*args)
    except UserError as exc:
        assert exc.message, "a UserError names what is wrong"
        assert "Traceback" not in str(exc)
        return None


# Spec files ------------------------------------------------------------------------------

SPEC_FIELDS = {
    "seq_len": values, "study": values, "seed": values, "space": values, "storage": values,
    "workload": st.one_of(values, st.fixed_dictionaries({"kind": st.sampled_from(["gpt", "hf", "entry_point", "x"])},
                                                        optional={"preset": values, "config_path": values,
                                                                  "entry_point": values, "model_type": values})),
    "target": st.one_of(values, st.dictionaries(st.sampled_from(["tokens", "steps", "epochs", "dataset_tokens",
                                                                 "loss", "reference_tokens"]), scalars, max_size=3)),
    "budget": st.one_of(values, st.dictionaries(st.sampled_from(["trials", "max_usd", "deadline_hours",
                                                                 "search_gpu_hours", "patience_trials"]),
                                                scalars, max_size=3)),
    "trial": st.one_of(values, st.dictionaries(st.sampled_from(["warmup_steps", "measure_steps", "timeout_s"]),
                                               scalars, max_size=3)),
    "batch": st.one_of(values, st.dictionaries(st.just("global_batch_samples"), scalars, max_size=1)),
}
specs = st.one_of(values, st.fixed_dictionaries({}, optional=SPEC_FIELDS))


@SETTINGS
@given(data=specs)
def test_any_spec_loads_and_round_trips_or_is_one_user_error(tmp_path, data):
    from autotune.spec import load_spec

    spec = _user_error_or(load_spec, _write(tmp_path, "spec.yaml", data))
    if spec is None:
        return
    for v in (spec.target.tokens, spec.budget.max_usd, spec.trial.timeout_s):
        assert v is None or math.isfinite(v)
    again = load_spec(_write(tmp_path, "again.yaml", spec.model_dump(mode="json")))
    assert again.model_dump() == spec.model_dump()


# Search spaces ---------------------------------------------------------------------------

SPACE_FIELDS = {k: st.one_of(values, st.lists(scalars, max_size=4))
                for k in ("num_gpus", "micro_batch_size", "grad_accum_steps", "precision", "checkpointing",
                          "zero_stage", "offload", "tp_degree")}


@SETTINGS
@given(data=st.one_of(values, st.fixed_dictionaries({}, optional=SPACE_FIELDS)))
def test_any_space_loads_and_round_trips_or_is_one_user_error(tmp_path, data):
    from autotune.search.space_file import load_space

    space = _user_error_or(load_space, str(_write(tmp_path, "space.yaml", data)))
    if space is not None:
        again = load_space(str(_write(tmp_path, "again.yaml", space.model_dump(mode="json"))))
        assert again == space


# Catalogs: the shipped one with one field of one entry replaced ---------------------------

@SETTINGS
@given(section=st.sampled_from(["offers", "gpus"]), index=st.integers(0, 100), field=st.text(max_size=10)
       | st.sampled_from(["name", "price_usd_per_gpu_hour", "gpu", "price_date", "memory_gb",
                          "peak_tflops", "gpus_per_node", "billing", "pricing"]), value=values)
def test_any_catalog_edit_loads_or_is_one_user_error(tmp_path, section, index, field, value):
    from autotune.pricing.catalog import DEFAULT_CATALOG
    from autotune.pricing.load import load_catalog

    cat = yaml.safe_load(DEFAULT_CATALOG.read_text())
    entries = cat[section]
    if isinstance(entries, dict):
        key = sorted(entries)[index % len(entries)]
        entries[key] = {**entries[key], field: value}
    else:
        entries[index % len(entries)] = {**entries[index % len(entries)], field: value}
    loaded = _user_error_or(load_catalog, _write(tmp_path, "catalog.yaml", cat))
    if loaded is not None:
        for o in loaded.offers:  # names users type and that land in shell scripts
            assert o.name.isprintable() and "\n" not in o.name


# Command-line overrides ------------------------------------------------------------------

OVERRIDES = ["study", "space", "budget.total_trials", "budget.search_gpu_hours", "budget.search_usd",
             "budget.patience_trials"]


@SETTINGS
@given(updates=st.dictionaries(st.sampled_from(OVERRIDES), scalars, max_size=3))
def test_any_flag_value_obeys_the_spec_rules_or_is_one_user_error(updates):
    from autotune.spec import SweepSpec

    spec = _user_error_or(lambda: SweepSpec().with_overrides(**updates))
    if spec is not None:
        assert SweepSpec.model_validate(spec.model_dump(mode="json")) == spec


@pytest.mark.parametrize("argv", [
    ["sweep", "--trials", "zero"], ["sweep", "--trials", "0"], ["sweep", "--patience", "-1"],
    ["sweep", "--max-gpu-hours", "inf"], ["report", "--max-usd", "abc"], ["sweep", "--study", "a b"],
    ["export", "--pick", "cheapest"], ["trial", "missing.json"],
])
def test_bad_flags_exit_2_with_one_message(cli, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv)
    assert code == 2 and "Traceback" not in err + out, (argv, err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("field, bad", [("name", "evil\nrm -rf ~"), ("name", "a b"), ("name", "x;y"),
                                        ("provider", "$(reboot)"), ("gpu", "h100\n")])
def test_catalog_names_that_would_be_shell_are_refused(tmp_path, cli, field, bad):
    from autotune.pricing.catalog import DEFAULT_CATALOG

    cat = yaml.safe_load(DEFAULT_CATALOG.read_text())
    cat["offers"][0][field] = bad
    path = _write(tmp_path, "catalog.yaml", cat)
    code, out, err = cli("catalog", "--catalog", str(path))
    assert code == 2 and "catalog.yaml" in err and "Traceback" not in err, err
