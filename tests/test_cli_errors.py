"""Bad input from a user: one clear message naming file and field, exit code 2, study untouched."""

from __future__ import annotations

import pytest

BAD_SPECS = {
    "malformed YAML": ("workload: {kind: gpt, preset: tiny\n", "not valid YAML"),
    "unknown field": ("wrokload: {kind: gpt}\n", "wrokload"),
    "unknown preset": ("workload: {kind: gpt, preset: tiny2}\n", "Did you mean 'tiny'"),
    "non-positive target": ("target: {tokens: -5}\n", "target"),
    "zero target steps": ("target: {steps: 0}\n", "steps"),
    "wrong type": ("seq_len: lots\n", "seq_len"),
    "not a mapping": ("- a\n- b\n", "mapping"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_bad_spec_exits_2_naming_file_and_field(tmp_path, run_cli, case):
    text, expected = BAD_SPECS[case]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    p = run_cli("sweep", str(spec), "--trials", "1")
    assert p.returncode == 2, p.stderr
    assert "spec.yaml" in p.stderr and expected in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "autotune.db").exists(), "the study must stay untouched"
    # One fix, the field's own where its check gives one: never "..", never two "To fix".
    assert p.stderr.count("To fix:") == 1 and ".." not in p.stderr.replace("...", ""), p.stderr


def test_bad_space_file_exits_2(tmp_path, run_cli):
    space = tmp_path / "space.yaml"
    space.write_text("micro_batch_size: [0]\n")
    p = run_cli("sweep", "--space", str(space), "--trials", "1")
    assert p.returncode == 2 and "space.yaml" in p.stderr and "micro_batch_size" in p.stderr
    assert not (tmp_path / "autotune.db").exists()


def test_missing_spec_file_exits_2(tmp_path, run_cli):
    p = run_cli("sweep", "nope.yaml")
    assert p.returncode == 2 and "nope.yaml" in p.stderr


def test_report_on_unknown_study_exits_2(tmp_path, run_cli):
    p = run_cli("report", "--study", "ghost")
    assert p.returncode == 2 and "ghost" in p.stderr


def test_storage_url_password_never_printed(tmp_path, run_cli):
    p = run_cli("report", "--study", "x", "--storage", "postgresql://me:hunter2@127.0.0.1:1/db")
    assert p.returncode == 2
    assert "hunter2" not in p.stderr + p.stdout and "***" in p.stderr


def test_debug_flag_shows_traceback(tmp_path, run_cli):
    p = run_cli("report", "--study", "ghost", "--debug")
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_cli_import_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, autotune.cli; assert 'torch' not in sys.modules, 'torch on the CLI path'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_offer_in_spec_fails_before_any_trial(tmp_path, run_cli):
    spec = tmp_path / "spec.yaml"
    spec.write_text("platforms: {offers: [aws-c7i-ondemnd]}\n")
    p = run_cli("sweep", str(spec), "--trials", "1")
    assert p.returncode == 2 and "aws-c7i-ondemnd" in p.stderr and "did you mean" in p.stderr
    assert not (tmp_path / "autotune.db").exists()


def test_the_next_commands_printed_after_a_sweep_paste_as_one_word_per_value(tmp_path):
    """The 'Next:' line is for pasting: a storage file or URL with a space, a quote or '$(...)'
    stays one argument (it was written in bare and split, or ran, when pasted)."""
    import shlex
    from pathlib import Path
    from types import SimpleNamespace

    from autotune.cli.sweep import next_commands

    odd = str(tmp_path / "a b'c $(touch pwned)")
    for spec, storage_file, flag in ((SimpleNamespace(study="s1", storage="x"), Path(odd + ".txt"), "--storage-file"),
                                     (SimpleNamespace(study="s1", storage=f"journal:///{odd}/j.log"), None, "--storage")):
        line = next_commands(spec, storage_file)[0].removeprefix("Next: ")
        words = shlex.split(line)
        assert words[words.index(flag) + 1] == (str(storage_file) if storage_file else spec.storage)


@pytest.mark.parametrize("args, flag, said", [
    (("estimate", "--params", "7e9", "--precision", "fp9"), "--precision", "'fp9' is not one of 'fp32'"),
    (("estimate", "--params", "7e9", "--checkpointing", "half"), "--checkpointing", "'half' is not one of"),
    (("export", "--launcher", "mpirun"), "--launcher", "'mpirun' is not one of"),
    (("estimate", "--params", "7e9", "--seq-len", "0"), "--seq-len", "must be greater than or equal to 1"),
    (("cost", "--gpu", "h100-sxm", "--gpus", "two"), "--gpus", "must be a valid integer"),
    (("sweep", "--trials", "abc"), "--trials' / '-n", "must be a valid integer"),
])
def test_a_bad_flag_value_reads_without_pydantics_wording(run_cli, args, flag, said):
    """typer checks a flag's value with pydantic and showed its wording: "Invalid value for
    '--precision': Value error, 'fp9' is not one of ...", "Input should be greater than ...".
    Now the flag and what is wrong, in words, exit code 2."""
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    text = " ".join(p.stderr.replace("│", " ").split())
    assert f"Invalid value for '{flag}': {said}" in text, p.stderr
    assert "Value error" not in text and "Input should be" not in text
    assert "unable to parse" not in text  # "a valid integer, unable to parse string as an integer"


@pytest.mark.parametrize("argv, said", [
    (("--max-gpu-hours", "0"), "--max-gpu-hours 0: must be greater than 0"),
    (("--max-search-usd", "nan"), "--max-search-usd nan: must be a finite number"),
    (("--study", "a b"), "--study 'a b': study name 'a b' is not allowed"),
])
def test_a_bad_sweep_flag_is_named_as_typed(tmp_path, run_cli, argv, said):
    """A sweep flag checked by the spec's rules answered with the spec's field and pydantic's
    wording: "command line: field `budget.search_gpu_hours`: Input should be greater than 0.
    To fix: correct the option (budget.search_gpu_hours=0.0)". Now the flag as typed, what is
    wrong, and where the rule is written; exit 2 and no study."""
    p = run_cli("sweep", "--trials", "1", *argv)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"error: {said}"), p.stderr
    assert "field `" not in p.stderr and "Input should be" not in p.stderr and "To fix: give " in p.stderr
    assert not (tmp_path / "autotune.db").exists()


def test_a_spec_files_bad_value_reads_as_a_flags_does(cli, tmp_path, monkeypatch):
    """A spec file's value, a flag's and a Python argument's are checked by pydantic alike, and
    read alike (autotune.errors.plain_message): a spec said "Input should be greater than 0"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text("seq_len: 0\n")
    code, out, err = cli("sweep", "spec.yaml", "--trials", "1")
    assert code == 2, out + err
    assert "field `seq_len`: must be greater than 0" in " ".join(err.split()), err
    assert "Input should be" not in err and not (tmp_path / "autotune.db").exists()


def test_a_missing_or_unknown_field_is_called_so(cli, tmp_path, monkeypatch):
    """A spec's unknown field read "Extra inputs are not permitted" and a catalog's missing one
    "Field required": pydantic's words (autotune.errors.plain_message). A field under a tagged
    union is named as the file spells it: `workload.presett`, not pydantic's `workload.gpt.presett`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text("setup: 3\nworkload: {kind: gpt, presett: tiny}\n")
    code, out, err = cli("sweep", "spec.yaml", "--trials", "1")
    said = " ".join(err.split())
    assert code == 2 and "field `setup`: not a field here (did you mean 'study'?)" in said, err
    assert "field `workload.presett`: not a field here (did you mean 'preset'?)" in said, err
    (tmp_path / "catalog.yaml").write_text("offers:\n  - name: x\n")
    code, out, err = cli("cost", "--gpu", "h100-sxm", "--params", "7e9", "--catalog", "catalog.yaml")
    assert code == 2 and "field `offers.0.gpu`: missing: it is required" in err, err
    assert "Field required" not in err + out and not (tmp_path / "autotune.db").exists()
