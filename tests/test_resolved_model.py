"""A Hugging Face family the count does not know (autotune.estimate.resolved), given as a
`model_type` and a few overrides: the fields it leaves out are its config class's defaults, which
only the trials' transformers knows. The preflight (a real subprocess in the trials'
environment) resolves them and builds the model on the meta device; the sweep, `autotune plan`
and a later report count that model, its parameters exact."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from autotune.contract import HFWorkload
from autotune.errors import UserError
from autotune.estimate.resolved import needs_resolving, remember, resolved_for
from autotune.estimate.workload import model_from_workload
from autotune.run.preflight import check_workload
from autotune.spec import SweepSpec
from tests.test_hf_shape import _worker_shape

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 100, "intermediate_size": 88}
# What each leaves at its own defaults: OLMoE its 64 experts and their width; Gemma 3 its
# 256-wide heads and q/k norms (and a gated GELU MLP, which the llama count reads as plain);
# Qwen3-Next its 512 experts, shared expert and linear-attention layers.
FAMILIES = {"olmoe": {"num_hidden_layers": 1, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 1024},
            "gemma3_text": TINY, "qwen3_next": TINY}


@pytest.fixture(autouse=True)
def _nothing_resolved_before_or_after(monkeypatch):
    """What a test resolves stays in it (the cache is per process)."""
    monkeypatch.setattr("autotune.estimate.resolved._resolved", {})


def _spec(tmp_path: Path, wl: HFWorkload) -> SweepSpec:
    return SweepSpec(workload=wl, seq_len=16, source=str(tmp_path / "spec.yaml"))


def test_only_a_family_outside_the_counts_table_is_resolved(tmp_path):
    assert not needs_resolving(HFWorkload(model_type="llama", config_overrides=TINY))
    assert needs_resolving(HFWorkload(model_type="olmoe"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", **TINY}))
    assert not needs_resolving(HFWorkload(config_path=str(tmp_path / "config.json")))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text", **TINY}))
    assert needs_resolving(HFWorkload(config_path=str(tmp_path / "config.json")))


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_preflight_resolves_a_family_the_count_does_not_know_to_its_build(model_type, tmp_path):
    wl = HFWorkload(model_type=model_type, config_overrides=FAMILIES[model_type])
    built = _worker_shape(wl)[0]
    before = model_from_workload(wl)
    assert before is not None and "approximate" in before.source
    # Read with llama's defaults: off by far more than any layout difference (before this, the
    # estimate a sweep prescreened with).
    assert abs(before.params / built - 1) > 0.8, (before.params, built)

    resolved = check_workload(_spec(tmp_path, wl))
    assert resolved is not None and resolved.params == built
    assert resolved.fields["model_type"] == model_type
    assert resolved.fields["hidden_size"] == FAMILIES[model_type]["hidden_size"]  # the overrides hold
    remember(wl, resolved)
    # A copy of the workload (a trial's) is the same workload.
    after = model_from_workload(HFWorkload.model_validate(wl.model_dump()))
    assert after is not None and after.params == built
    assert "the trials' transformers" in after.source and "approximate" in after.source
    # What FSDP2 and ZeRO-3 gather at a time, from the build too: its largest decoder layer, and
    # its largest module's own tensors (an embedding, a projection, a layer's fused experts).
    from trials.workloads import hf

    model, _ = hf.build_hf_model(wl, meta=True)
    layers = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    own = [sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()]
    assert (after.block_params, after.largest_layer_params) == (max(layers), max(own))


def test_a_known_family_and_the_built_in_gpt_are_not_resolved(tmp_path):
    wl = HFWorkload(model_type="llama", config_overrides=TINY)
    assert check_workload(_spec(tmp_path, wl)) is None and resolved_for(wl) is None


def _cli(tmp_path: Path, *args: str):
    import subprocess

    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.e2e
def test_a_sweep_holds_back_what_a_model_of_an_unknown_family_cannot_fit(tmp_path):
    """OLMoE at one layer of 512: 203M parameters, 3.3 GB of fp32 weights, gradients and Adam
    state, under a 2 GB limit per rank. Counted with llama's defaults (one dense MLP 4 x 512
    wide, 4.2M parameters) it looked small and every trial was launched, and ran out of memory;
    counted as built, it is held back, with what would make it fit."""
    wl = {"kind": "hf", "model_type": "olmoe", "config_overrides": FAMILIES["olmoe"]}
    (tmp_path / "spec.yaml").write_text(json.dumps({
        "workload": wl, "seq_len": 16, "target": {"tokens": 1e7},
        "space": {"num_gpus": [1], "micro_batch_size": [1], "precision": ["fp32"]},
        "memory": {"limit_bytes_per_rank": 2_000_000_000}, "trial": {"timeout_s": 300}}))
    p = _cli(tmp_path, "sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "memory prescreen off" not in p.stdout
    assert "held back" in p.stdout and "no config fits the memory limit" in p.stdout, p.stdout
    assert not list((tmp_path / "autotune_runs").glob("*/trial_*")), "a trial was launched"

    # Another process (a report, an export) counts the model the sweep did: the study keeps it.
    workload = HFWorkload(model_type="olmoe", config_overrides=FAMILIES["olmoe"])
    built = _worker_shape(workload)[0]
    from autotune.search.study import open_study

    open_study(f"sqlite:///{tmp_path / 'autotune.db'}", "default", create=False)
    shape = model_from_workload(workload)
    assert shape is not None and shape.params == built
    doc = json.loads(_cli(tmp_path, "report", "--json").stdout)
    predicted = doc["trials"][0]["predicted_peak_mem_bytes"]
    assert predicted >= 16 * built  # fp32 weights, gradients and Adam's two moments at least
    with sqlite3.connect(tmp_path / "autotune.db") as db:  # stored once, under its own name
        assert db.execute("select count(*) from study_user_attributes where key = 'autotune_resolved_model'"
                          ).fetchone() == (1,)


def test_plan_counts_a_bare_model_type_of_an_unknown_family_as_built(tmp_path):
    """`model_type: gemma3_text` alone: every size at Gemma3TextConfig's defaults. The count
    refused it before (its sizes missing, "use a decoder-only transformer config.json")."""
    (tmp_path / "spec.yaml").write_text(json.dumps({
        "workload": {"kind": "hf", "model_type": "gemma3_text"}, "seq_len": 512, "target": {"tokens": 1e9},
        "space": {"num_gpus": [1], "micro_batch_size": [1], "precision": ["bf16"]}}))
    p = _cli(tmp_path, "plan", "spec.yaml", "--gpu", "h100-sxm", "--json")
    assert p.returncode == 0, p.stderr
    built = _worker_shape(HFWorkload(model_type="gemma3_text"))[0]
    assert f"gemma3_text, {built:,} parameters" in json.loads(p.stdout)["assumptions"][0]


def test_estimate_counts_a_config_json_of_an_unknown_family_as_built(tmp_path):
    """A whole config.json of a Gemma-3-like model: its gated GELU MLP read as a plain one and
    its 256-wide heads as 160-wide, the count was 85% over (352,616,192); as built it is exact."""
    config = {"model_type": "gemma3_text", "hidden_size": 640, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 1, "vocab_size": 262144, "head_dim": 256, "intermediate_size": 2048}
    (tmp_path / "config.json").write_text(json.dumps(config))
    from autotune.estimate.compute import model_from_hf_config

    built = _worker_shape(HFWorkload(config_path=str(tmp_path / "config.json")))[0]
    assert model_from_hf_config(tmp_path / "config.json").params / built > 1.5  # the count alone
    p = _cli(tmp_path, "estimate", "--model", "config.json", "--seq-len", "512", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["params"] == built and "build, exact" in doc["model_source"]


def test_plan_keeps_the_counts_own_reading_where_the_trials_transformers_cannot_build_it(tmp_path):
    """A config.json of an architecture this transformers does not know (a model with its own
    code): the preflight fails, and `autotune plan`, which runs no trial, counts its sizes with
    the llama layout as before, saying it is approximate."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "my_own_arch", **TINY}))
    (tmp_path / "spec.yaml").write_text(json.dumps({
        "workload": {"kind": "hf", "config_path": "config.json"}, "seq_len": 64, "target": {"tokens": 1e9},
        "space": {"num_gpus": [1], "micro_batch_size": [1], "precision": ["bf16"]}}))
    p = _cli(tmp_path, "plan", "spec.yaml", "--gpu", "h100-sxm", "--json")
    assert p.returncode == 0, p.stderr
    assert "my_own_arch; approximate: counted with the llama layout" in json.loads(p.stdout)["assumptions"][0]


@pytest.mark.parametrize("model_type,layout", [("gemma3", "gemma3_text"), ("mamba", None)])
def test_a_composite_config_or_one_without_attention_is_counted_by_its_build(model_type, layout, tmp_path):
    """Gemma 3's released configs are composite (its language model's fields under
    `text_config`, a vision tower beside it) and Mamba has no attention heads: the count could
    read neither and the sweep ran without a memory prescreen. Now the language model's fields
    give the layout (Mamba: none, its activations not estimated) and the build every parameter."""
    wl = HFWorkload(model_type=model_type)
    with pytest.raises(UserError, match="missing"):
        model_from_workload(wl)
    resolved = check_workload(_spec(tmp_path, wl))
    assert resolved is not None and resolved.params == _worker_shape_of_any(wl)
    remember(wl, resolved)
    shape = model_from_workload(wl)
    assert shape is not None and shape.params == resolved.params
    if layout:
        assert shape.name == layout and shape.n_layers == resolved.fields["text_config"]["num_hidden_layers"]
    else:
        assert shape.n_layers is None and "activations not estimated" in shape.source


def _worker_shape_of_any(wl: HFWorkload) -> int:
    """The parameters of the worker's meta build, whatever the config's layout."""
    from trials.workloads import hf

    model, _ = hf.build_hf_model(wl, meta=True)
    return sum(p.numel() for p in model.parameters())


def test_a_config_that_cannot_be_read_here_is_not_resolved(tmp_path):
    """Its own reading names the problem (a missing config.json, as workload.config_path:
    tests/test_bad_files.py); a preflight would only say it another way."""
    assert not needs_resolving(HFWorkload(config_path=str(tmp_path / "missing.json")))
