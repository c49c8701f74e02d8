"""`autotune trial` runs the config it is given, more threads than this machine's usable
cores included (the sweep never offers such a config): it says that the ranks shared cores,
before it starts and beside its tokens/s. A new user ran 8 ranks on 2 cores and read their
tokens/s without a word of caution."""

from __future__ import annotations

from autotune.cli.trial import _crowded_cores
from autotune.contract import GPTWorkload, TrialConfig
from autotune.contract.hardware import usable_cpu_count


def _cfg(threads: int) -> TrialConfig:
    return TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=32, num_gpus=1, threads_per_rank=threads,
                       warmup_steps=1, measure_steps=2, max_measure_steps=2, min_measure_s=0.0, timeout_s=120)


def test_a_trial_with_more_threads_than_cores_says_so(cli, tmp_path):
    cores = usable_cpu_count()  # this machine's, whatever it is
    assert _crowded_cores(_cfg(cores)) is None
    (tmp_path / "config.json").write_text(_cfg(cores + 1).model_dump_json())
    code, out, err = cli("trial", str(tmp_path / "config.json"), "--out", str(tmp_path / "t"))
    assert code == 0, out + err
    said = f"1 rank(s) x {cores + 1} thread(s) on {cores} usable core(s): the ranks share cores"
    assert f"warning: {said}" in " ".join(err.split())
    assert f"note: {said}" in " ".join(out.split()) and "tokens/s: " in out
