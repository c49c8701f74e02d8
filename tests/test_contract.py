"""The controller/worker JSON contract: round trips, validation, and a pinned schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotune.contract import (
    GPT_PRESETS,
    SCHEMA_VERSION,
    EntryPointWorkload,
    GPTWorkload,
    HFWorkload,
    MemorySource,
    Offload,
    Precision,
    TrialConfig,
    TrialResult,
    TrialStatus,
)

PINNED = Path(__file__).parent / "data" / "contract_schema.json"


def current_schema() -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "TrialConfig": TrialConfig.model_json_schema(),
        "TrialResult": TrialResult.model_json_schema(),
    }


def test_config_round_trip(tmp_path):
    cfg = TrialConfig(workload=GPTWorkload(preset="mini"), seq_len=64, micro_batch_size=4,
                      grad_accum_steps=2, num_gpus=2, precision=Precision.bf16, zero_stage=3,
                      offload=Offload.optimizer_params)
    cfg.write(tmp_path / "c.json")
    back = TrialConfig.read(tmp_path / "c.json")
    assert back == cfg
    assert back.global_batch_samples == 4 * 2 * 2
    assert back.global_batch_tokens == 4 * 2 * 2 * 64


@pytest.mark.parametrize("workload", [
    HFWorkload(config_path="/x/config.json"),
    HFWorkload(model_type="llama", config_overrides={"hidden_size": 64}),
    EntryPointWorkload(entry_point="pkg.mod:build", kwargs={"a": 1}),
])
def test_workload_union_round_trip(tmp_path, workload):
    cfg = TrialConfig(workload=workload)
    cfg.write(tmp_path / "c.json")
    assert TrialConfig.read(tmp_path / "c.json").workload == workload


def test_result_round_trip(tmp_path):
    r = TrialResult(status=TrialStatus.oom, error_type="OutOfMemoryError", error="boom",
                    peak_mem_bytes=123, peak_mem_source=MemorySource.cuda_allocator,
                    step_times_s=[0.1, 0.2])
    r.write(tmp_path / "r.json")
    assert TrialResult.read(tmp_path / "r.json") == r
    # The file is plain JSON with enum values as strings: any language can read it.
    raw = json.loads((tmp_path / "r.json").read_text())
    assert raw["status"] == "oom" and raw["peak_mem_source"] == "cuda_allocator"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    TrialResult(status=TrialStatus.ok).write(tmp_path / "r.json")
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("kwargs, field", [
    (dict(num_gpus=2, tp_degree=4), "tp_degree"),
    (dict(zero_stage=0, offload=Offload.optimizer), "offload"),
    (dict(zero_stage=2, offload=Offload.optimizer_params), "parameter offload"),
    (dict(micro_batch_size=0), "micro_batch_size"),
    (dict(workload={"kind": "gpt", "preset": "tiny2"}), "Did you mean 'tiny'"),
])
def test_invalid_configs_say_why(kwargs, field):
    with pytest.raises(ValidationError) as exc:
        TrialConfig(**kwargs)
    assert field in str(exc.value)


def test_entry_point_must_name_a_function():
    with pytest.raises(ValidationError, match="module:function"):
        EntryPointWorkload(entry_point="just_a_module")


def test_preset_param_counts_span_tests_to_planning():
    counts = {name: s.num_params() for name, s in GPT_PRESETS.items()}
    assert 0.5e6 < counts["tiny"] < 2e6
    assert 110e6 < counts["small"] < 140e6  # GPT-2 small class
    assert 6e9 < counts["7b"] < 7.5e9


def test_contract_schema_is_pinned():
    """The contract changes on purpose only. If this fails after an intended change, bump
    SCHEMA_VERSION when old files no longer read, then regenerate the pin:
        python -c "from tests.test_contract import write_pin; write_pin()"
    """
    assert PINNED.is_file(), "missing pinned schema; run write_pin()"
    assert json.loads(PINNED.read_text()) == json.loads(json.dumps(current_schema()))


def write_pin() -> None:
    PINNED.parent.mkdir(parents=True, exist_ok=True)
    PINNED.write_text(json.dumps(current_schema(), indent=1, sort_keys=True) + "\n")


def test_the_controller_named_to_its_ranks_reads_back():
    """AUTOTUNE_CONTROLLER (autotune.run.argv.launch_env -> trials/watchdog.py): this host, this
    pid and its start time; anything else set there is not a controller, and nothing is watched."""
    import os
    import socket

    from autotune.contract.process import controller_env_value, parse_controller, start_ticks

    ref = parse_controller(controller_env_value())
    assert ref == (socket.gethostname(), os.getpid(), start_ticks(os.getpid()))
    assert parse_controller("node-7:1234:") == ("node-7", 1234, None)
    assert [parse_controller(v) for v in ("", "1234", "host:abc:1", ":1:2", "h:1:x")] == [None] * 5
