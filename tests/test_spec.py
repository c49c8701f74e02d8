"""Spec files: strict quantities, safe study names, paths relative to the spec's folder, and
command-line overrides validated by the same rules as the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import UserError
from autotune.spec import SweepSpec, load_spec


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, field", [
    ("target: {tokens: .nan}", "target.tokens"),
    ("target: {tokens: .inf}", "target.tokens"),
    ("target: {tokens: -.inf}", "target.tokens"),
    ("budget: {max_usd: .nan}", "budget.max_usd"),
    ("budget: {search_gpu_hours: .inf}", "budget.search_gpu_hours"),
    ("trial: {timeout_s: .nan}", "trial.timeout_s"),
    ("memory: {safety_margin: .nan}", "memory.safety_margin"),
])
def test_nan_and_infinity_are_not_quantities(tmp_path, text, field):
    with pytest.raises(UserError) as exc:
        load_spec(_write(tmp_path, text))
    assert f"`{field}`" in str(exc.value) and "To fix" in str(exc.value)


@pytest.mark.parametrize("written, limit_bytes", [
    ("85899345920", 80 * 2**30),
    ("1e9", 10**9),            # YAML 1.1 reads 1e9 and 8.0e10 as text (its exponent needs a sign)
    ("8.0e10", 8 * 10**10),
    ("8.0e+10", 8 * 10**10),   # ... and this as a float
    ("80 GiB", 80 * 2**30),    # binary units: powers of 1024
    ("'74.5GiB'", int(74.5 * 2**30)),
    ("512 MiB", 512 * 2**20),
    ("80 GB", 80 * 10**9),     # decimal units: powers of 1000, as GPU sheets print them
])
def test_a_memory_limit_is_bytes_or_a_size_with_its_unit(tmp_path, written, limit_bytes):
    spec = load_spec(_write(tmp_path, f"memory: {{limit_bytes_per_rank: {written}}}"))
    assert spec.memory.limit_bytes_per_rank == limit_bytes
    assert type(spec.memory.limit_bytes_per_rank) is int  # stored in the study as a plain integer


@pytest.mark.parametrize("written, says", [
    ("1.5", "1.5 is not a whole number of bytes"),  # not rounded to 1 byte (pydantic's ByteSize would)
    ("80 gigs", "'80 gigs' is not a size"),
    ("-1 GiB", "'-1 GiB' is not a size"),
    ("0", "greater than 0"),
    (".nan", "not a whole number of bytes"),
    ("yes", "True is not a size"),  # YAML 1.1's boolean, not 1 byte
])
def test_a_memory_limit_that_is_not_a_size_is_one_user_error(tmp_path, written, says):
    with pytest.raises(UserError) as exc:
        load_spec(_write(tmp_path, f"memory: {{limit_bytes_per_rank: {written}}}"))
    msg = str(exc.value)
    assert "`memory.limit_bytes_per_rank`" in msg and says in msg and "To fix" in msg, msg


@pytest.mark.parametrize("name", ["../../escaped", "/abs/path", "a/b", "x/", "./x", "..", ".hidden",
                                  "", "with space", "semi;colon", "new\nline", "x" * 101])
def test_unsafe_study_names_are_refused(tmp_path, name):
    import yaml

    with pytest.raises(UserError) as exc:
        load_spec(_write(tmp_path, yaml.safe_dump({"study": name})))
    assert "`study`" in str(exc.value)


@pytest.mark.parametrize("name", ["default", "llama-8b_run2", "v1.2", "A" * 100])
def test_safe_study_names_round_trip(tmp_path, name):
    assert load_spec(_write(tmp_path, f"study: '{name}'")).study == name


def test_relative_paths_resolve_against_the_spec_folder(tmp_path, monkeypatch):
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "llama-tiny.json").write_text('{"model_type": "llama"}')
    spec_path = sub / "spec.yaml"
    spec_path.write_text("workload: {kind: hf, config_path: llama-tiny.json}\n"
                         "space: spaces/mine.yaml\nplatforms: {catalog: ../prices.yaml}\n"
                         "storage: sqlite:///studies/a.db\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the user runs the sweep from another folder
    spec = load_spec(Path("..") / "project" / "spec.yaml")
    assert spec.workload.config_path == str(sub / "llama-tiny.json")
    assert spec.space == str(sub / "spaces" / "mine.yaml")
    assert spec.platforms.catalog == str(tmp_path / "prices.yaml")
    assert spec.storage == f"sqlite:///{sub}/studies/a.db"
    # Absolute paths, named spaces and server URLs are left as given.
    spec_path.write_text(f"workload: {{kind: hf, config_path: {sub}/llama-tiny.json}}\nspace: default\n"
                         "storage: postgresql://u@db/a\n")
    spec = load_spec(spec_path)
    assert (spec.workload.config_path, spec.space, spec.storage) == (
        f"{sub}/llama-tiny.json", "default", "postgresql://u@db/a")


def test_entry_point_modules_beside_the_spec_import(tmp_path):
    spec = load_spec(_write(tmp_path, "workload: {kind: entry_point, entry_point: 'my_model:build', "
                                      "python_path: [lib]}\n"))
    assert spec.workload.python_path == [str(tmp_path / "lib"), str(tmp_path)]


def test_overrides_follow_the_spec_rules():
    spec = SweepSpec()
    assert spec.with_overrides(**{"budget.trials": 3, "study": "x2"}).budget.trials == 3
    assert spec.with_overrides(**{"budget.search_gpu_hours": None}).budget.search_gpu_hours is None
    for updates, field in [({"budget.search_gpu_hours": 0}, "budget.search_gpu_hours"),
                           ({"budget.trials": -1}, "budget.trials"),
                           ({"study": "../x"}, "study"),
                           ({"budget.max_usd": float("nan")}, "budget.max_usd")]:
        with pytest.raises(UserError) as exc:
            spec.with_overrides(**updates)
        assert f"`{field}`" in str(exc.value) and "command line" in str(exc.value)


@pytest.mark.parametrize("url, secret", [
    ("postgresql://u:SECRETPASS@127.0.0.1:1/db", "SECRETPASS"),
    ("postgresql://u@127.0.0.1:1/db?password=qu3ry-secret", "qu3ry-secret"),
    ("postgresql://admin@corp:Sup3r%40Secret@127.0.0.1:1/db", "Sup3r"),
])
def test_a_bad_option_beside_a_storage_url_never_shows_its_password(cli, tmp_path, monkeypatch, url, secret):
    """The error for a bad option names the option that failed; the storage URL given beside
    it, by flag, file or environment, shows no form of its password (the message listed every
    option with its value, the URL's password included)."""
    from autotune.run.storage import STORAGE_ENV

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    (tmp_path / "url.txt").write_text(url + "\n")
    for given, env in ((["--storage", url], None), (["--storage-file", "url.txt"], None), ([], url)):
        if env:
            monkeypatch.setenv(STORAGE_ENV, env)
        code, out, err = cli("sweep", "--trials", "1", "--max-gpu-hours", "-1", *given)
        assert code == 2 and "budget.search_gpu_hours" in err and "Traceback" not in err
        assert secret not in out + err and "storage=" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["url.txt"]  # nothing written


def test_an_option_error_names_the_option_that_failed_and_masks_any_url_it_lists():
    with pytest.raises(UserError) as exc:
        SweepSpec().with_overrides(**{"storage": "postgresql://u:SECRETPASS@db/a", "budget.trials": 0})
    assert str(exc.value).endswith("(budget.trials=0)")
    from pydantic import ValidationError

    from autotune.spec import _flags_shown

    try:  # an error located on no option: every option given is listed, URLs masked
        SweepSpec.model_validate({"budget": {"trials": "x"}})
    except ValidationError as err:
        shown = _flags_shown({"storage": "postgresql://u:SECRETPASS@db/a", "study": None}, err)
    assert shown == "storage='postgresql://u:***@db/a'"


def test_a_sequence_longer_than_the_gpt_takes_is_refused_before_any_trial(tmp_path, run_cli):
    # Every trial of it was `unsupported` (seq_len over the learned positions): the whole budget
    # spent on one reason the spec already says.
    spec = _write(tmp_path, "workload: {kind: gpt, preset: tiny}\nseq_len: 1024\n")
    with pytest.raises(UserError) as exc:
        load_spec(spec)
    assert "seq_len 1024" in str(exc.value) and "max_seq_len 256" in str(exc.value)
    assert "at most 256" in str(exc.value)
    p = run_cli("sweep", str(spec), "--trials", "1")
    assert p.returncode == 2 and "max_seq_len 256" in p.stderr, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["spec.yaml"]  # nothing written
    # Its own shape's positions decide; the preset's are then not the limit.
    shape = "{n_layers: 1, d_model: 64, n_heads: 4, vocab_size: 128, max_seq_len: 1024}"
    assert load_spec(_write(tmp_path, f"workload: {{kind: gpt, shape: {shape}}}\nseq_len: 1024\n")).seq_len == 1024


def test_a_journal_url_with_credentials_is_not_made_a_path(tmp_path):
    # It became journal:///<spec folder>/u:pw@/tmp/x.log, and the refusal quoted that garble
    # ("storage journal:///.../***@/tmp/x.log: a journal URL names a file ...").
    spec = load_spec(_write(tmp_path, 'storage: "journal://u:topsecret@/tmp/x.log"\n'))
    assert spec.storage == "journal://u:topsecret@/tmp/x.log"
    assert load_spec(_write(tmp_path, "storage: journal://runs/s.log\n")).storage == f"journal://{tmp_path}/runs/s.log"


# A spec may hold its space inline, as a mapping, instead of naming a file.
INLINE_SPACE = {"num_gpus": [8], "micro_batch_size": [1, 2], "precision": ["bf16"], "zero_stage": [1, 3]}


def test_an_inline_space_is_searched_as_the_same_space_in_a_file(cli, tmp_path):
    import json

    import yaml

    from autotune.search.identity import study_identity

    (tmp_path / "space.yaml").write_text(yaml.safe_dump(INLINE_SPACE))
    base = {"workload": {"kind": "gpt", "preset": "1b"}, "seq_len": 2048, "target": {"tokens": 1e10}}
    bills, identity = {}, {}
    for name, space in (("file.yaml", "space.yaml"), ("inline.yaml", INLINE_SPACE)):
        (tmp_path / name).write_text(yaml.safe_dump({**base, "space": space}))
        code, out, err = cli("plan", str(tmp_path / name), "--gpu", "h100-sxm", "--json", "--top", "100")
        assert code == 0, err
        bills[name] = {b["config"] for b in json.loads(out)["bills"]}  # labels: "8x h100-sxm mb2 ... zero1"
        identity[name] = study_identity(load_spec(tmp_path / name))
    # the plan bills its configs and no others (mb 1-2 x ZeRO 1/3 on 8 GPUs), as from the file
    assert bills["inline.yaml"] == bills["file.yaml"]
    assert {(c.split()[2], c.split()[-1]) for c in bills["inline.yaml"]} == \
        {("mb1", "zero1"), ("mb1", "zero3"), ("mb2", "zero1"), ("mb2", "zero3")}
    # and a study begun with one resumes with the other: the same space
    assert identity["inline.yaml"] == identity["file.yaml"]


def test_a_typo_in_an_inline_space_is_one_error_naming_its_field_and_nothing_is_written(run_cli, tmp_path):
    (tmp_path / "spec.yaml").write_text("space: {num_gpus: [1], micro_batch: [1, 2]}\nstudy: typo\n")
    p = run_cli("sweep", "spec.yaml", "--trials", "1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "spec.yaml: field `space.micro_batch`" in p.stderr and "did you mean 'micro_batch_size'" in p.stderr
    assert "Traceback" not in p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["spec.yaml"]  # no study, no runs folder


@pytest.mark.parametrize("written, says", [
    ("[1, 2]", "a mapping of each dimension's choices"),
    ("5", "a mapping of each dimension's choices"),
    ("null", "a mapping of each dimension's choices"),
    ("{}", "the inline space lists no dimension"),
])
def test_a_space_that_is_neither_a_name_nor_a_mapping_is_one_error(tmp_path, written, says):
    with pytest.raises(UserError) as err:
        load_spec(_write(tmp_path, f"space: {written}\n"))
    lines = str(err.value).splitlines()
    assert lines[0].startswith(f"{tmp_path / 'spec.yaml'}: field `space`: ") and says in lines[0], lines
    assert len([ln for ln in lines if "field `" in ln]) == 1  # one message, not one per kind it may be
