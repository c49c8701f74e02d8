"""SkyPilot tasks for other GPU types: written by `autotune sweep --skypilot-task`, they hold the
catalog's offers (cloud/region, accelerator, instance type) and no secret, and they are valid
SkyPilot tasks.

Valid by SkyPilot's own code where `skypilot` is importable (`sky.Task.from_yaml`); otherwise
against SkyPilot's published schemas (tests/data/skypilot_task_schema.json: what
`sky.utils.schemas.get_task_schema()` and `get_resources_schema()` return in skypilot 0.14.1,
the schemas `Task.from_yaml` validates a file and its resources with). The tasks for H100,
A100 and H200 were also parsed by `sky.Task.from_yaml` of skypilot 0.14.1 in a separate
environment, offline. skypilot is not a dependency: installing it into this project's
environment would downgrade click (8.5 -> 8.1.8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

SECRET = "tuner:Sky S3cret@db.example.com"
SCHEMA = Path(__file__).parent / "data" / "skypilot_task_schema.json"


@pytest.fixture
def tasks(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_STORAGE", f"postgresql://{SECRET}/autotune")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"workload": {"kind": "gpt", "preset": "tiny"},
                                                        "study": "llama"}))
    code, out, err = cli("sweep", "spec.yaml", "--trials", "6", "--skypilot-task", "h100-sxm:8",
                         "--skypilot-task", "A100-80GB:8", "--skypilot-task", "H200:8")
    assert code == 0, out + err
    assert "sky launch --secret AUTOTUNE_STORAGE skypilot/autotune-h200x8.yaml" in out
    return {p.stem.removeprefix("autotune-"): p for p in (tmp_path / "skypilot").glob("*.yaml")}


def test_a_file_autotune_did_not_write_is_never_overwritten(cli, tmp_path, monkeypatch):
    """The tasks folder holds a user's own edited task: refused with exit 2, the file as it was."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_STORAGE", "postgresql://u@h/db")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"study": "llama"}))
    (tmp_path / "skypilot").mkdir()
    mine = tmp_path / "skypilot" / "autotune-h200x8.yaml"
    mine.write_text("# my own edits\n")
    code, out, err = cli("sweep", "spec.yaml", "--skypilot-task", "h200:8")
    assert code == 2 and "autotune did not write" in out + err, out + err
    assert "--force" not in out + err  # sweep has no --force: the fix must not name one
    assert mine.read_text() == "# my own edits\n" and sorted(p.name for p in mine.parent.iterdir()) == [mine.name]
    # A second write over autotune's own tasks is fine (its manifest says they are its own).
    mine.unlink()
    assert cli("sweep", "spec.yaml", "--skypilot-task", "h200:8")[0] == 0
    assert cli("sweep", "spec.yaml", "--skypilot-task", "h200:8")[0] == 0


def test_one_task_per_type_from_the_catalogs_offers(tasks):
    assert sorted(tasks) == ["a100-80gbx8", "h100-sxmx8", "h200x8"]
    h100 = yaml.safe_load(tasks["h100-sxmx8"].read_text())
    entries = h100["resources"]["any_of"]
    # AWS p5.48xlarge, Lambda's 8x SXM5, RunPod's "H100-SXM": the catalog's on-demand 8-GPU offers.
    assert {"infra": "aws/us-east-1", "accelerators": "H100:8"} in entries
    assert {"infra": "lambda/us-east-1", "accelerators": "H100:8"} in entries
    assert {"infra": "runpod/US", "accelerators": "H100-SXM:8"} in entries
    assert not [e for e in entries if e["infra"].startswith("runpod/") and e["accelerators"] == "H100:8"]
    assert h100["run"] == "autotune sweep spec.yaml --study llama --trials 6"
    assert h100["secrets"] == {"AUTOTUNE_STORAGE": None}


def test_no_task_holds_the_secret(tasks):
    for path in tasks.values():
        text = path.read_text()
        assert "S3cret" not in text and "postgresql" not in text and "tuner" not in text, path


def test_a_name_two_types_share_on_a_cloud_is_pinned_by_instance_type():
    from autotune.pricing.load import load_catalog
    from autotune.run.skypilot_task import candidates

    catalog = load_catalog(None)
    # Lambda calls both its 1-GPU H100s "H100": the instance type tells SXM from PCIe.
    assert {"infra": "lambda/us-east-1", "accelerators": "H100:1", "instance_type": "gpu_1x_h100_pcie"} \
        in candidates(catalog, "h100-pcie", 1)
    assert {"infra": "lambda/us-east-1", "accelerators": "H100:1", "instance_type": "gpu_1x_h100_sxm5"} \
        in candidates(catalog, "h100-sxm", 1)
    # RunPod names them apart ("H100" is its PCIe, "H100-SXM" its SXM): no instance type there.
    assert {"infra": "runpod/US", "accelerators": "H100:1"} in candidates(catalog, "h100-pcie", 1)
    assert {"infra": "runpod/US", "accelerators": "H100-SXM:1"} in candidates(catalog, "h100-sxm", 1)


def test_a_size_no_offer_rents_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("sweep", "--skypilot-task", "h100-sxm:3")
    assert code == 2 and "rents 3 x h100-sxm" in err and "1, 2, 4, 8" in err
    code, _, err = cli("sweep", "--skypilot-task", "h100-sxn")
    assert code == 2 and "did you mean" in err
    assert not (tmp_path / "skypilot").exists()  # nothing half-written


def test_the_runs_folder_is_passed_on_and_a_storage_flag_is_refused(cli, tmp_path, monkeypatch):
    """--runs-dir reaches the task's worker; --storage / --storage-file would put the URL (or the
    file holding it) into a synced task, so they are refused with exit 2 and nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({"study": "llama"}))
    code, out, err = cli("sweep", "spec.yaml", "--runs-dir", "cloud runs", "--skypilot-task", "h200:8")
    assert code == 0, out + err
    task = yaml.safe_load((tmp_path / "skypilot" / "autotune-h200x8.yaml").read_text())
    assert task["run"] == "autotune sweep spec.yaml --study llama --runs-dir 'cloud runs'"
    (tmp_path / "url.txt").write_text(f"postgresql://{SECRET}/autotune\n")
    for flags in (["--storage", f"postgresql://{SECRET}/autotune"], ["--storage-file", "url.txt"]):
        code, out, err = cli("sweep", "spec.yaml", *flags, "--skypilot-task", "a100-80gb:8")
        assert code == 2 and f"{flags[0]} given with --skypilot-task" in err, out + err
        assert "S3cret" not in out + err
        assert not (tmp_path / "skypilot" / "autotune-a100-80gbx8.yaml").exists()
    # Nor in the spec file, which the task syncs to the node with its workdir.
    # Also a URL mistyped without '://' (the password is still in the file the task syncs).
    for url in (f"postgresql://{SECRET}/autotune", f"postgresql:/{SECRET}/autotune"):
        (tmp_path / "pg.yaml").write_text(yaml.safe_dump({"study": "llama", "storage": url}))
        code, out, err = cli("sweep", "pg.yaml", "--skypilot-task", "a100-80gb:8")
        assert code == 2 and "holds a storage URL with a password" in err and "S3cret" not in out + err, out + err
        assert not (tmp_path / "skypilot" / "autotune-a100-80gbx8.yaml").exists()


def test_a_file_the_task_would_not_find_on_its_node_is_refused(cli, tmp_path, monkeypatch):
    """The node gets this folder (the task's workdir) and nothing else: a space, catalog or model
    config outside it, or named by an absolute path, is refused with exit 2 and nothing written
    (the task rented its GPUs, then failed on a file it did not have). A --space file inside
    the folder reaches the worker by its path inside it."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(work)
    space = yaml.safe_dump({"num_gpus": [8], "precision": ["bf16"]})
    for folder in (work, elsewhere):
        (folder / "space.yaml").write_text(space)
    (work / "model").mkdir()
    (work / "model" / "config.json").write_text("{}")
    refused = [
        ({"space": "../elsewhere/space.yaml"}, [], "field space: '../elsewhere/space.yaml' lies outside"),
        ({"space": str(work / "space.yaml")}, [], "is an absolute path"),
        ({"platforms": {"catalog": "../elsewhere/c.yaml"}}, [], "field platforms.catalog"),
        ({"workload": {"kind": "hf", "config_path": str(work / "model")}}, [], "field workload.config_path"),
        ({}, ["--space", str(elsewhere / "space.yaml")], "--space file"),
    ]
    for fields, flags, message in refused:
        (work / "spec.yaml").write_text(yaml.safe_dump({"study": "llama", **fields}))
        code, out, err = cli("sweep", "spec.yaml", *flags, "--skypilot-task", "h200:8")
        assert code == 2 and message in err and "To fix:" in err, out + err
        assert not (work / "skypilot").exists()
    (work / "spec.yaml").write_text(yaml.safe_dump({"study": "llama", "workload": {
        "kind": "hf", "config_path": "model"}, "space": "space.yaml"}))
    code, out, err = cli("sweep", "spec.yaml", "--space", str(work / "space.yaml"), "--skypilot-task", "h200:8")
    assert code == 0, out + err
    task = yaml.safe_load((work / "skypilot" / "autotune-h200x8.yaml").read_text())
    assert task["run"] == "autotune sweep spec.yaml --study llama --space space.yaml"


def test_the_tasks_are_valid_skypilot_tasks(tasks):
    try:
        import sky
    except ImportError:
        sky = None
    for path in tasks.values():
        if sky is not None:
            task = sky.Task.from_yaml(str(path))
            assert task.secrets == {} or "AUTOTUNE_STORAGE" in task.secrets
            continue
        validate(yaml.safe_load(path.read_text()))


def validate(task: dict) -> None:
    import jsonschema

    schemas = json.loads(SCHEMA.read_text())
    jsonschema.validate(task, schemas["task"])
    jsonschema.validate(task["resources"], schemas["resources"])


def test_the_schema_check_can_fail(tasks):
    import jsonschema

    for typo in ({"acelerators": "H200:8"}, {"infra": 7}):
        task = yaml.safe_load(tasks["h200x8"].read_text())
        task["resources"]["any_of"][0].update(typo)  # what SkyPilot refuses
        with pytest.raises(jsonschema.ValidationError):
            validate(task)
    task = yaml.safe_load(tasks["h200x8"].read_text())
    task["secret"] = {"AUTOTUNE_STORAGE": None}
    with pytest.raises(jsonschema.ValidationError):
        validate(task)
