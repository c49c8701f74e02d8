"""The sweep's local moves (autotune.search.strategy.LocalMoves): which config it queues when the sampler
proposes one already measured. The study records here are written directly (values and
config attributes, as a sweep stores them): this tests the choice, a pure function of the
study's records; real sweeps that use it are in tests/test_sweep_e2e.py."""

from __future__ import annotations

import optuna
import pytest

from autotune.contract import GPTWorkload
from autotune.search.machine import MachineSpace
from autotune.search.objective import trial_config_for
from autotune.search.reuse import config_key
from autotune.search.strategy import LocalMoves, ranked_by_front
from autotune.search.study import DIRECTIONS
from autotune.spec import SweepSpec


@pytest.fixture()
def setup(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("num_gpus: [1]\nmicro_batch_size: [1, 2, 4, 8]\nprecision: [fp32]\n"
                     "checkpointing: [none, full]\n")
    spec = SweepSpec(workload=GPTWorkload(preset="tiny"), seq_len=32, space=str(space))
    ms = MachineSpace.for_spec(spec)
    study = optuna.create_study(directions=DIRECTIONS)
    return spec, ms, study


def _record(study, spec, ms, micro: int, ckpt: str, hours: float, usd: float) -> None:
    values = dict(num_gpus=1, tp_degree=1, micro_batch_size=micro, grad_accum_steps=1,
                  precision="fp32", checkpointing=ckpt, zero_stage=0, offload="none")
    cfg = trial_config_for(values, spec, ms, 1, seed=0)
    hw = ms.hardware.key()
    study.add_trial(optuna.trial.create_trial(
        params={"micro_batch_size": micro, "checkpointing": ckpt},
        distributions={"micro_batch_size": optuna.distributions.CategoricalDistribution([1, 2, 4, 8]),
                       "checkpointing": optuna.distributions.CategoricalDistribution(["none", "full"])},
        values=[hours, usd], system_attrs={"constraints": [0.0]},
        user_attrs={"config": cfg.model_dump(mode="json"), "hardware": hw, "status": "ok",
                    "config_key": config_key(cfg, hw)}))


def _ctx(spec, ms, study):
    from pathlib import Path

    from autotune.search.context import SweepContext

    return SweepContext.build(spec, study, Path("unused"), machine=ms)


def test_queues_untried_neighbours_of_the_best_configs_first(setup):
    spec, ms, study = setup
    _record(study, spec, ms, 4, "none", hours=10.0, usd=5.0)   # the best
    _record(study, spec, ms, 2, "none", hours=12.0, usd=6.0)   # dominated
    _record(study, spec, ms, 8, "none", hours=11.0, usd=7.0)   # dominated
    assert [t.params["micro_batch_size"] for t in ranked_by_front(study.trials, ms.hardware)] == [4, 2, 8]
    moves = LocalMoves(_ctx(spec, ms, study), seed=0)
    # Micro 4's neighbours: micro 2 and 8 (tried) and full checkpointing (untried): the only move.
    assert moves.enqueue_next(study)
    (waiting,) = [t for t in study.trials if t.state.name == "WAITING"]
    fixed = waiting.system_attrs["fixed_params"]
    assert (fixed["micro_batch_size"], fixed["checkpointing"]) == (4, "full")
    assert waiting.user_attrs["local_move_from"] == 0
    # Queued once. Asked again: the runner-up's (micro 2) untried neighbours come next.
    assert moves.enqueue_next(study)
    second = [t for t in study.trials if t.state.name == "WAITING"][1]
    assert second.user_attrs["local_move_from"] == 1
    fixed = second.system_attrs["fixed_params"]
    assert (fixed["micro_batch_size"], fixed["checkpointing"]) in {(1, "none"), (2, "full")}
    assert moves.exhausted(study) is None  # 8 configs, 3 tried (queued ones are not yet tried)


def test_exhausted_once_every_listed_config_is_tried(setup):
    spec, ms, study = setup
    for micro in (1, 2, 4, 8):
        for ckpt in ("none", "full"):
            _record(study, spec, ms, micro, ckpt, hours=float(micro), usd=float(micro))
    assert LocalMoves(_ctx(spec, ms, study), seed=0).exhausted(study) == 8


def test_gpu_trials_carry_the_catalog_peak_so_the_worker_computes_mfu(setup):
    """The fingerprint the GPU check recorded on an H200 (a mock of the GPU: none runs here):
    each trial's config carries the catalog's dense peak for its precision, the number the
    worker divides by for MFU; on CPU it stays unset (MFU "not computed", never guessed). The
    peak is bookkeeping: it does not change the config's identity for reuse."""
    from autotune.contract import DeviceKind, HardwareFingerprint
    from autotune.search.machine import device_peak_flops

    spec, ms, _ = setup
    h200 = HardwareFingerprint(hostname="gpu-node", device_kind=DeviceKind.cuda, device_name="NVIDIA H200",
                               device_count=1, device_memory_bytes=143771 * 2**20)
    peaks = device_peak_flops(h200, None)
    assert peaks["bf16"] == pytest.approx(989e12, rel=0.01)  # H200 SXM datasheet, dense bf16
    assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.01)
    values = dict(num_gpus=1, tp_degree=1, micro_batch_size=2, grad_accum_steps=1,
                  precision="bf16", checkpointing="none", zero_stage=0, offload="none")
    gpu_ms = MachineSpace(h200, ms.restricted, ms.full, peaks)
    on_gpu = trial_config_for(values, spec, gpu_ms, 1, seed=0)
    assert on_gpu.device_peak_flops == peaks["bf16"]
    assert trial_config_for(values, spec, ms, 1, seed=0).device_peak_flops is None  # CPU
    assert device_peak_flops(h200.model_copy(update={"device_name": "Some Future GPU"}), None) == {}
    no_peak = on_gpu.model_copy(update={"device_peak_flops": None})
    assert config_key(on_gpu, "hw") == config_key(no_peak, "hw")


def test_one_error_on_three_configs_stops_but_config_dependent_endings_do_not():
    """autotune.search.sweep.RepeatedError on recorded trials: `unsupported`, oom and timeout
    belong to their configs however often they repeat; a crash with the same message (numbers
    aside) on three different configs is the sweep's problem, not the configs'."""
    from autotune.record import TrialRecord
    from autotune.search.budget import RepeatedError

    def t(status, error, key):
        return TrialRecord(status=status, error=error, config_key=key)

    watch = RepeatedError()
    for key in "abcd":
        watch.add(t("unsupported", "UnsupportedConfig: fp16 on cpu", key))
        watch.add(t("oom", "OutOfMemoryError: 12 GiB", key))
    assert watch.verdict() is None
    watch.add(t("crash", "ValueError: bad rank 0 port 4411", "a"))
    watch.add(t("crash", "ValueError: bad rank 1 port 5123", "a"))  # same config again
    watch.add(t("crash", "ValueError: bad rank 0 port 6001", "b"))
    assert watch.verdict() is None
    watch.add(t("crash", "ValueError: bad rank 0 port 7777", "c"))
    assert "3 different configs" in watch.verdict() and "ValueError: bad rank N port N" in watch.verdict()


@pytest.mark.parametrize("seed", range(5))
def test_a_step_that_improved_is_continued_first(setup, seed):
    """The objective's structure: micro 4 beat micro 8, so micro 2 (the same direction) is
    queued before micro 4's other untried neighbour (full checkpointing), whatever the seed."""
    spec, ms, study = setup
    _record(study, spec, ms, 4, "none", hours=10.0, usd=5.0)
    _record(study, spec, ms, 8, "none", hours=11.0, usd=6.0)
    assert LocalMoves(_ctx(spec, ms, study), seed=seed).enqueue_next(study)
    (waiting,) = [t for t in study.trials if t.state.name == "WAITING"]
    assert waiting.system_attrs["fixed_params"]["micro_batch_size"] == 2
