"""Bad files and figures a user gives: a file that is not UTF-8 text, a folder where a file is
expected, a Hugging Face config with sizes no model has, `cost` figures that overflow. Each is
one `error:` line naming the file (or field, or flag) and the fix, exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOT_UTF8 = {
    "latin-1": "caf\u00e9: 1\n".encode("latin-1"),  # 0xe9 alone: not UTF-8
    "utf-16": "seq_len: 128\n".encode("utf-16"),   # a byte-order mark, then two bytes a character
    "binary": bytes(range(256)),
}

# The command reading each kind of file, with `{f}` where the file goes. `sweep` fails at load,
# before a study or a trial (--trials 1).
READERS = {
    "spec (plan)": ("plan", "{f}"),
    "spec (sweep)": ("sweep", "{f}", "--trials", "1"),
    "search space": ("sweep", "--space", "{f}", "--trials", "1"),
    "catalog": ("catalog", "--catalog", "{f}"),
    "trial config": ("trial", "{f}"),
}


def _one_error(code: int, err: str, *named: str) -> str:
    """The error line, after checking exit 2, a single `error:` line, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and err.count("error:") == 1, err
    assert "To fix:" in lines[0], err
    for n in named:
        assert n in lines[0], (n, err)
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """tmp_path as the working folder: a command that got further would write here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("encoding", list(NOT_UTF8))
@pytest.mark.parametrize("reader", list(READERS))
def test_a_file_that_is_not_utf8_is_named_with_the_fix(cli, here, reader, encoding):
    name = "bad.json" if reader == "trial config" else "bad.yaml"
    (here / name).write_bytes(NOT_UTF8[encoding])
    line = _one_error(*cli(*(a.format(f=name) for a in READERS[reader]))[::2], name, "not UTF-8 text")
    assert "UTF-8" in line.split("To fix:")[1]
    if encoding == "utf-16":
        assert "UTF-16" in line
    assert not (here / "autotune.db").exists() and not (here / "autotune_runs").exists()


@pytest.mark.parametrize("args", [("plan", "{f}"), ("sweep", "{f}", "--trials", "1"), ("trial", "{f}"),
                                  ("sweep", "--space", "{f}.yaml", "--trials", "1")],
                         ids=["plan", "sweep", "trial", "sweep --space"])
def test_a_folder_where_a_file_is_expected_is_called_a_folder(cli, here, args):
    (here / "configs").mkdir()
    (here / "configs.yaml").mkdir()
    line = _one_error(*cli(*(a.format(f="configs") for a in args))[::2], "configs", "is a folder")
    assert "does not exist" not in line


def test_a_trial_whose_hf_config_is_missing_is_refused_before_it_launches(cli, here):
    """`autotune trial` checks the model's config file first: no trial folder, no worker."""
    (here / "c.json").write_text('{"workload": {"kind": "hf", "config_path": "/nonexistent/llama"}, "seq_len": 32}')
    _one_error(*cli("trial", "c.json")[::2], "/nonexistent/llama", "does not exist")
    assert sorted(f.name for f in here.iterdir()) == ["c.json"]


@pytest.mark.parametrize("text, named", [
    ('{"model_type": "llama", "hidden_size": 64,', "is not readable JSON"),
    ('{"hidden_size": 64}', "has no `model_type`"),
], ids=["not JSON", "no model_type"])
def test_a_trial_whose_hf_config_does_not_load_is_refused_before_it_launches(cli, here, text, named):
    """Checked as a sweep's preflight checks it: the worker crashed with a JSONDecodeError that
    named no file (exit 1), and left a trial folder behind."""
    (here / "llama.json").write_text(text)
    (here / "c.json").write_text(json.dumps({"workload": {"kind": "hf", "config_path": str(here / "llama.json")},
                                             "seq_len": 32}))
    _one_error(*cli("trial", "c.json")[::2], "c.json", "llama.json", named)
    assert sorted(f.name for f in here.iterdir()) == ["c.json", "llama.json"]


@pytest.mark.parametrize("config, named", [
    ('{"device": "cuda", "seq_len": 32}', ["`device` is cuda", "no visible CUDA GPU", '"device": "cpu"']),
    ('{"device": "cpu", "precision": "fp8", "seq_len": 32}', ["`precision` fp8 on CPU ranks", '"precision": "bf16"']),
], ids=["cuda on a CPU machine", "fp8 on CPU ranks"])
def test_a_trial_asking_for_a_gpu_feature_on_cpu_is_refused_before_it_launches(cli, here, monkeypatch,
                                                                               config, named):
    """Such a trial launched a worker, which ended it `unsupported` (exit 1) and left
    autotune_runs/single/trial_0000 behind. AUTOTUNE_FORCE_CPU hides any GPU, so the test
    also holds on a GPU machine."""
    from autotune.run.hardware import local_hardware

    monkeypatch.setenv("AUTOTUNE_FORCE_CPU", "1")
    local_hardware.cache_clear()
    try:
        (here / "c.json").write_text(config)
        _one_error(*cli("trial", "c.json")[::2], "c.json", *named)
    finally:
        local_hardware.cache_clear()
    assert sorted(f.name for f in here.iterdir()) == ["c.json"]


@pytest.mark.parametrize("command, missing, named", [
    (("plan", "spec.yaml"), "llama-7b.json", ["workload.config_path", "spec file's folder"]),
    (("plan", "spec.yaml"), "space.yaml", ["`space:` file is read from the spec file's folder"]),
    (("sweep", "spec.yaml", "--trials", "1"), "space.yaml", ["`space:` file is read from the spec file's folder"]),
], ids=["plan, no config", "plan, no space", "sweep, no space"])
def test_the_7b_spec_copied_without_its_files_says_they_are_read_from_its_folder(cli, here, command,
                                                                                 missing, named):
    """A user copies examples/llama7b-8gpu/spec.yaml without one of its files: plan answered
    with estimate's fix ("give a preset name") for the model's config, and the space's fix
    was "check the path"."""
    example = Path(__file__).resolve().parent.parent / "examples" / "llama7b-8gpu"
    for name in ("spec.yaml", "llama-7b.json", "space.yaml"):
        if name != missing:
            (here / name).write_text((example / name).read_text())
    line = _one_error(*cli(*command)[::2], missing, *named)
    assert "preset" not in line
    assert missing not in {f.name for f in here.iterdir()} and len(list(here.iterdir())) == 2


@pytest.mark.parametrize("text", ["", "# prices to come\n"], ids=["empty", "comments only"])
@pytest.mark.parametrize("reader", ["catalog", "search space"])
def test_an_empty_catalog_or_space_is_one_line_saying_so(cli, here, reader, text):
    """An empty catalog used to list three missing fields over three lines; an empty search
    space ran a sweep of one config of all defaults."""
    (here / "f.yaml").write_text(text)
    _one_error(*cli(*(a.format(f="f.yaml") for a in READERS[reader]))[::2], "f.yaml", "is empty")
    assert sorted(f.name for f in here.iterdir()) == ["f.yaml"]


def test_a_trial_config_of_another_schema_version_is_refused(cli, here):
    """A config another autotune wrote (its fields may mean something else here) used to run."""
    (here / "c.json").write_text('{"schema_version": 99, "seq_len": 32}')
    line = _one_error(*cli("trial", "c.json")[::2], "c.json", "schema_version 99", "(1)")
    assert "one autotune version" in line.split("To fix:")[1]
    assert sorted(f.name for f in here.iterdir()) == ["c.json"]


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "vocab_size": 100}
BAD_HF = {
    "zero hidden": ({"hidden_size": 0}, ["`hidden_size`", " 0,"]),
    "negative vocabulary": ({"vocab_size": -100}, ["`vocab_size`", "-100"]),
    "no layers": ({"num_hidden_layers": 0}, ["`num_hidden_layers`", " 0,"]),
    "heads not a number": ({"num_key_value_heads": "x"}, ["`num_key_value_heads`", '"x"']),
    "hidden overflows": ({"hidden_size": 1e300}, ["`hidden_size`", "1e+300"]),
    "a fraction": ({"intermediate_size": 172.5}, ["`intermediate_size`", "172.5"]),
    "true for a size": ({"num_attention_heads": True}, ["`num_attention_heads`", "true"]),
    "kv heads not dividing": ({"num_key_value_heads": 3}, ["`num_attention_heads` 4", "`num_key_value_heads` 3"]),
    "gpt2 heads not dividing": ({"model_type": "gpt2", "num_attention_heads": 5},
                                ["`hidden_size` 64", "`num_attention_heads` 5"]),
}


@pytest.mark.parametrize("case", list(BAD_HF))
def test_a_bad_size_in_an_hf_config_is_named_by_estimate(cli, here, case):
    fields, named = BAD_HF[case]
    (here / "config.json").write_text(json.dumps({**LLAMA, **fields}))
    _one_error(*cli("estimate", "--model", "config.json")[::2], "config.json", *named)


@pytest.mark.parametrize("case", ["zero hidden", "no layers", "heads not a number", "hidden overflows"])
def test_a_bad_size_in_an_hf_config_is_named_by_plan(cli, here, case):
    fields, named = BAD_HF[case]
    (here / "config.json").write_text(json.dumps({**LLAMA, **fields}))
    (here / "spec.yaml").write_text("workload: {kind: hf, config_path: config.json}\n")
    _one_error(*cli("plan", "spec.yaml")[::2], "config.json", *named)


def test_a_bad_size_set_by_config_overrides_says_so(cli, here):
    (here / "config.json").write_text(json.dumps({**LLAMA, "num_key_value_heads": 2, "head_dim": 24}))
    code, _, err = cli("estimate", "--model", "config.json", "--json")
    assert code == 0, err  # the config itself is good: grouped-query heads, a stated head width
    (here / "spec.yaml").write_text("workload: {kind: hf, config_path: config.json, "
                                    "config_overrides: {num_hidden_layers: 0}}\n")
    _one_error(*cli("plan", "spec.yaml")[::2], "config_overrides", "`num_hidden_layers`")


@pytest.mark.parametrize("flags, named", [
    (("--params", "1e300", "--mfu", "0.4", "--target-tokens", "1e9"), ["--params 1e+300 (too large)"]),
    (("--tokens-per-s", "1e-300", "--target-tokens", "1e300"),
     ["--tokens-per-s 1e-300 (too small)", "--target-tokens 1e+300 (too large)"]),
    (("--tokens-per-s", "1e-300", "--target-tokens", "1e9"), ["--tokens-per-s 1e-300 (too small)"]),
    (("--tokens-per-s", "3200", "--target-tokens", "1e9", "--checkpoint-gb", "1e300"),
     ["--checkpoint-gb 1e+300 (too large)"]),
], ids=["params", "tokens-per-s and target", "tokens-per-s", "checkpoint-gb"])
def test_cost_figures_that_overflow_name_the_input(cli, here, flags, named):
    line = _one_error(*cli("cost", "--gpu", "h100-sxm", *flags)[::2], "not a finite number", *named)
    assert "--target-tokens 1e+09" not in line  # an ordinary figure is not blamed


def test_cost_overflow_is_a_user_error_from_python_too():
    import autotune
    from autotune.errors import UserError

    with pytest.raises(UserError, match="--params"):
        autotune.cost(gpu="h100-sxm", params=1e300, mfu=0.4, target_tokens=1e9)
