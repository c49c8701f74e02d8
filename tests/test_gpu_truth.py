"""Issue 28's GPU ground truth, the part that runs here: `scripts/gpu_check.sh --truth-only`
measures the `h200` bench (scripts/bench_search.py) with the sweep's pooled trials until its
deadline and keeps every run (its dry run: real CPU trials of the tiny stand-in), and a truth
measured on a GPU replays on this CPU machine as the GPU it ran on (as_truth_machine).

The GPU runs themselves need a GPU. The replay test stands in for one with a truth file whose
single run records an H200 fingerprint: no GPU is here, and it checks only what the replay
reads of that record (the machine), not any figure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import bench_search as bs  # noqa: E402
import bench_truth as bt  # noqa: E402


def _truth_only(out: Path, seconds: int, repeats: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", "--truth-only",
                           "--truth-s", str(seconds), "--truth-repeats", str(repeats), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)


def _runs(doc: dict) -> list[tuple[str, str]]:
    return sorted((key, meta["started_utc"] + str(meta["round"])) for key, e in doc["entries"].items()
                  for meta in e["runs_meta"])


def _check_deadline(log: str, made: list[tuple[str, str]], before: int, asked: int, seconds: int) -> None:
    """One call with a deadline `seconds` away, which found `before` runs in the file and was
    asked for `asked` in all, made the runs `made`: none started past its deadline, and its log
    says the deadline stopped it exactly when it made fewer than asked, with the count left."""
    # The deadline is set before the call's first run starts and no run starts after it, so
    # each started less than `seconds` after the first (in the record's whole seconds: at most).
    starts = sorted(datetime.strptime(at[:19], "%Y-%m-%d %H:%M:%S") for _, at in made)
    assert starts and starts[-1] - starts[0] <= timedelta(seconds=seconds), starts
    left = asked - before - len(made)
    assert ("deadline reached" in log) == (left > 0), log
    if left:
        assert f"deadline reached: {left} of {asked - before} runs not measured" in log, log


def test_the_gpu_truth_is_measured_until_its_deadline_and_a_second_call_tops_it_up(tmp_path):
    first = _truth_only(tmp_path, 6)
    assert first.returncode == 0, first.stderr + first.stdout
    path = tmp_path / "truth_h200_dry_run.json"
    doc = json.loads(path.read_text())
    # The stand-in's identity names it, so it can never top up a GPU's truth.
    assert (doc["identity"]["preset"], doc["identity"]["seq_len"]) == ("tiny", 64)
    n_configs = len(bt.enumerate_space(*_space_of_h200()))
    runs = _runs(doc)
    # The first run starts before the deadline; none after it, and the log says whether the
    # deadline cut the 2 rounds of 16 configs short (however fast this machine is).
    assert 1 <= len(runs) <= 2 * n_configs
    _check_deadline((tmp_path / "truth.log").read_text(), runs, 0, 2 * n_configs, 6)
    assert {key for key, _ in runs} <= {bt.config_key(v) for _, v in bt.enumerate_space(*_space_of_h200())}

    # A third round asked for: always something to top up, even where the first call made
    # every run of its two rounds.
    second = _truth_only(tmp_path, 3, repeats=3)
    assert second.returncode == 0, second.stderr + second.stdout
    after = _runs(json.loads(path.read_text()))
    assert len(after) > len(runs) and set(runs) <= set(after)  # topped up, nothing lost
    made = sorted(set(after) - set(runs))
    _check_deadline((tmp_path / "truth.log").read_text(), made, len(runs), 3 * n_configs, 3)


def _space_of_h200():
    """(restricted space, global batch) of the h200 bench on this machine, as the dry run sees it."""
    _, _, spec, ms, _ = bs.bench_space("h200", measure=True, preset="tiny", seq_len=64)
    return ms.restricted, spec.batch.global_batch_samples


def test_a_truth_measured_on_a_gpu_replays_as_that_gpu(tmp_path, monkeypatch, truth_machine_undone):
    from autotune.contract import DeviceKind
    from autotune.run.hardware import local_hardware

    here = local_hardware()
    # Stand-in: no GPU here. One run's record says an H200 measured it; the replay reads only that.
    h200 = here.model_copy(update=dict(device_kind=DeviceKind.cuda, device_name="NVIDIA H200", device_count=1,
                                       device_memory_bytes=150_754_820_096, driver_version="580.159.03",
                                       cuda_version="13.0", cpu_count=16, host_memory_bytes=135 * 2**30))
    cache = tmp_path / "truth_h200_pool.json"
    cache.write_text(json.dumps({"identity": {}, "entries": {"k": {"config": {}, "results": [
        {"hardware": here.model_dump(mode="json")}, {"hardware": h200.model_dump(mode="json")}]}}}))
    monkeypatch.setitem(bs.BENCHES["h200"], "cache", cache)

    _, _, spec, ms, configs = bs.bench_space("h200")
    hw = local_hardware()
    assert (hw.device_kind, hw.device_name, hw.device_count, hw.device_memory_bytes) == \
        (DeviceKind.cuda, "NVIDIA H200", 1, 150_754_820_096)
    assert ms.hardware.device_kind is DeviceKind.cuda and hw.cpu_count == 16
    # The space the GPU measured: 4 micro-batches x 2 checkpointing x (DDP, FSDP2 with offload).
    assert len(configs) == 16
    assert {v["fsdp"].value if hasattr(v["fsdp"], "value") else v["fsdp"] for _, v in configs} == {"none", "full_shard"}
    cfg = bt.trial_config(configs[0][1], spec, ms, seed=0)
    assert cfg.device is DeviceKind.cuda and cfg.workload.preset == "1b" and cfg.seq_len == 2048
    # A CPU bench replayed next in the same process (bench_matrix's twice-budget replays follow
    # h200's) sees this machine again: it stopped with "no choice of `num_gpus` (2) can run".
    _, _, _, ms, _ = bs.bench_space("ds")
    assert (local_hardware().device_kind, ms.hardware.device_count) == (here.device_kind, here.device_count)


def test_a_gpu_bench_without_its_truth_says_how_to_measure_it(tmp_path, monkeypatch, capsys,
                                                              truth_machine_undone):
    monkeypatch.setitem(bs.BENCHES["h200"], "cache", tmp_path / "missing.json")
    assert "h200" not in bs.measured_benches()
    with pytest.raises(SystemExit) as exit_:
        bs.bench_space("h200")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "missing.json holds no run measured on a GPU" in err
    assert "scripts/gpu_check.sh --truth-only --truth-s 300" in err


@pytest.mark.parametrize("argv, says", [(["--python-version", "three"], "--python-version takes 3.N, got 'three'"),
                                        (["--wheel-dir", "x"], "unknown option '--wheel-dir'")])
def test_the_gpu_wheel_script_refuses_bad_flags_before_downloading(tmp_path, argv, says):
    # Its download itself needs PyPI (the wheels for a GPU machine without an index); its
    # flags are checked before any of it, and nothing is written.
    out = tmp_path / "whl"
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu_wheels.sh"), "--out", str(out), *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and not out.exists()
