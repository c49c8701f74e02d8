"""The spec reference (docs/spec_reference.md) is generated from the pydantic models, and every
field it shows has a description: the committed page matches what the models say now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("spec_reference", REPO / "scripts" / "spec_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_spec_reference_is_the_generated_one():
    gen = _generator()
    assert gen.DOC.read_text() == gen.render(), "docs/spec_reference.md is stale: run python scripts/spec_reference.py"


def test_every_field_of_the_spec_and_the_trial_config_has_a_description():
    gen = _generator()
    models = [gen.SweepSpec, *gen._nested(gen.SweepSpec), *gen.WORKLOADS, gen.TrialConfig]
    missing = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items()
               if not f.exclude and not (f.description or "").strip()]
    assert missing == []


def test_a_changed_description_makes_the_page_stale():
    gen = _generator()
    field = gen.SweepSpec.model_fields["seq_len"]
    before = field.description
    try:
        field.description = "changed"
        assert gen.render() != gen.DOC.read_text()
    finally:
        field.description = before
