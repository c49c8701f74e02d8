"""The workload check before a sweep's first trial (autotune.run.preflight, trials.preflight): a
real subprocess in the trials' environment; a bad workload is one UserError (exit 2)."""

from __future__ import annotations

import json

import pytest

from autotune.errors import UserError
from autotune.run.preflight import check_workload
from autotune.spec import load_spec


def _spec(tmp_path, workload: str):
    p = tmp_path / "spec.yaml"
    p.write_text(f"workload: {workload}\n")
    return load_spec(p)


def test_the_builtin_gpt_and_good_workloads_pass(tmp_path):
    check_workload(_spec(tmp_path, "{kind: gpt, preset: tiny}"))
    (tmp_path / "llama.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    check_workload(_spec(tmp_path, "{kind: hf, config_path: llama.json}"))  # beside the spec
    check_workload(_spec(tmp_path, "{kind: entry_point, entry_point: 'tests.fixtures.entry_points:build'}"))


@pytest.mark.parametrize("workload, files, words", [
    ("{kind: hf, config_path: missing.json}", {}, "does not exist"),
    ("{kind: hf, config_path: bad.json}", {"bad.json": "{not json"}, "not readable JSON"),
    ("{kind: hf, config_path: nomodel.json}", {"nomodel.json": "{}"}, "model_type"),
    ("{kind: hf, config_path: odd.json}", {"odd.json": '{"model_type": "no-such-arch"}'}, "no-such-arch"),
    ("{kind: hf, model_type: no-such-arch}", {}, "no-such-arch"),
    ("{kind: entry_point, entry_point: 'no_such_module_xyz:build'}", {}, "no_such_module_xyz"),
    ("{kind: entry_point, entry_point: 'mymod:nothere'}", {"mymod.py": "x = 1\n"}, "nothere"),
    ("{kind: entry_point, entry_point: 'broken:build'}", {"broken.py": "import no_such_dep_xyz\n"},
     "no_such_dep_xyz"),
])
def test_bad_workloads_end_before_any_trial(tmp_path, workload, files, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    spec = _spec(tmp_path, workload)
    with pytest.raises(UserError) as exc:
        check_workload(spec)
    assert words in str(exc.value) and "To fix" in str(exc.value)
    assert str(tmp_path / "spec.yaml") in str(exc.value)  # names the spec file


@pytest.mark.parametrize("workload, files, words", [
    # A keyword the function does not take failed every trial alike (3 trials, then exit 1).
    ("{kind: entry_point, entry_point: 'kw:build', kwargs: {d_model: 32}}",
     {"kw.py": "def build(seq_len, micro_batch_size, device, d=64):\n    pass\n"},
     "entry point 'kw:build' cannot take the worker's call"),
    ("{kind: entry_point, entry_point: 'kw:build', kwargs: {d: 32}}",
     {"kw.py": "def build(seq_len, micro_batch_size):\n    pass\n"}, "unexpected keyword argument 'device'"),
    # A module it imports is missing: its own folder is on the path already.
    ("{kind: entry_point, entry_point: 'broken:build'}", {"broken.py": "import no_such_dep_xyz\n"},
     "'broken' (entry point 'broken:build') imports 'no_such_dep_xyz', which is not installed"),
    # The module raises as it imports: named as the module's, not the spec's, problem.
    ("{kind: entry_point, entry_point: 'raises:build'}", {"raises.py": "raise RuntimeError('needs MYVAR')\n"},
     "importing 'raises' (entry point 'raises:build') raised RuntimeError: needs MYVAR"),
    ("{kind: entry_point, entry_point: 'mymod:nothere'}", {"mymod.py": "x = 1\n"},
     "To fix: name one of its functions after the colon"),
])
def test_an_entry_point_the_worker_cannot_call_ends_before_any_trial_with_the_fix_for_its_cause(
        tmp_path, workload, files, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UserError) as exc:
        check_workload(_spec(tmp_path, workload))
    assert words in str(exc.value) and "python_path" not in str(exc.value)


def test_an_entry_point_taking_kwargs_passes(tmp_path):
    (tmp_path / "kw.py").write_text("def build(seq_len, micro_batch_size, **kw):\n    pass\n")
    check_workload(_spec(tmp_path, "{kind: entry_point, entry_point: 'kw:build', kwargs: {d: 32}}"))


@pytest.mark.parametrize("workload, words", [
    # transformers' own message lists every model type it has (hundreds of names).
    ("{kind: hf, model_type: llamaa}", "does not know model_type 'llamaa' (did you mean 'llama'"),
    # An encoder-decoder builds its config; every trial then ended `unsupported` (never "the
    # same error"), the whole budget.
    ("{kind: hf, model_type: t5}", "has no causal LM (AutoModelForCausalLM) for model_type 't5'"),
    # A misspelt override is kept as a stray attribute: the model had llama's default size.
    ("{kind: hf, model_type: llama, config_overrides: {hidden_sise: 64, num_hidden_layers: 2}}",
     "config_overrides 'hidden_sise' (did you mean 'hidden_size'?) is not a field of LlamaConfig"),
])
def test_an_hf_model_type_or_override_transformers_would_not_build_as_asked_ends_before_any_trial(
        tmp_path, workload, words):
    with pytest.raises(UserError) as exc:
        check_workload(_spec(tmp_path, workload))
    assert words in str(exc.value) and "To fix" in str(exc.value)
    assert len(str(exc.value)) < 500  # one line to read, not transformers' list of every model


def test_overrides_transformers_takes_under_another_name_pass(tmp_path):
    # Aliases (gpt2's hidden_size is n_embd) and keys the config turns into fields
    # (rope_theta into rope_parameters, torch_dtype into dtype) are applied, so not refused.
    check_workload(_spec(tmp_path, "{kind: hf, model_type: gpt2, config_overrides: {hidden_size: 32, "
                                   "n_layer: 1, n_head: 2, n_positions: 128}}"))
    check_workload(_spec(tmp_path, "{kind: hf, model_type: llama, config_overrides: {hidden_size: 64, "
                                   "rope_theta: 500000.0, torch_dtype: bfloat16}}"))
    # Not a field of Qwen2Config, but its modeling code reads it: getattr(config, "head_dim", ...).
    check_workload(_spec(tmp_path, "{kind: hf, model_type: qwen2, config_overrides: {hidden_size: 64, "
                                   "num_attention_heads: 4, num_key_value_heads: 2, head_dim: 32}}"))


@pytest.mark.parametrize("workload", [
    "{kind: hf, config_path: short.json}",
    # Without the field in a file: the limit is the model type's own (gpt2's n_positions).
    "{kind: hf, model_type: gpt2, config_overrides: {n_positions: 64, n_embd: 32, n_layer: 1, n_head: 2}}",
])
def test_a_sequence_longer_than_the_hf_model_takes_ends_before_any_trial(tmp_path, workload):
    # Every trial's build refuses it (trials/workloads/hf.py, check_positions): the preflight
    # says it once instead of a budget of `unsupported` trials.
    (tmp_path / "short.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                     "max_position_embeddings": 64}))
    spec = _spec(tmp_path, workload)
    assert spec.seq_len == 128
    with pytest.raises(UserError) as exc:
        check_workload(spec)
    assert "seq_len 128 exceeds the model's max_position_embeddings 64" in str(exc.value)
    assert "To fix: set seq_len to at most 64" in str(exc.value)
    check_workload(spec.with_overrides(seq_len=64))
