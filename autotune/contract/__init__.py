"""The JSON contract between the controller (`autotune/`) and the worker (`trials/`), and the
rules both sides must apply alike. The only package the worker imports from the controller;
it imports nothing heavier than pydantic, so a trial process pays nothing for the controller.

    cfg = TrialConfig(workload=GPTWorkload(preset="tiny"), seq_len=128, micro_batch_size=4)
    cfg.write(folder / "config.json")
    result = TrialResult.read(folder / "result.json")

config (TrialConfig and its choices), result (TrialResult, HardwareFingerprint), deepspeed
(the DeepSpeed JSON of a config), engines (engine and launcher choice, accelerate's
precision names), flops (FLOPs per token, MFU), hardware (the host fingerprint), process (is a
pid still the process we started), jsonio.
Modules inside this package import each other directly, never through this file.
"""

from autotune.contract.config import (
    GPT_PRESETS,
    SCHEMA_VERSION,
    Checkpointing,
    DeviceKind,
    EntryPointWorkload,
    FSDPMode,
    GPTShape,
    GPTWorkload,
    HFWorkload,
    Launcher,
    Offload,
    Precision,
    TrainingKnobs,
    TrialConfig,
    Workload,
    preset_names,
)
from autotune.contract.deepspeed import deepspeed_buffer_sizes, deepspeed_config
from autotune.contract.engines import ACCELERATE_MIXED_PRECISION, EngineKind, default_launcher, engine_for
from autotune.contract.jsonio import write_json_atomic
from autotune.contract.result import HardwareFingerprint, MemoryReport, MemorySource, TrialResult, TrialStatus

__all__ = [
    "ACCELERATE_MIXED_PRECISION", "GPT_PRESETS", "SCHEMA_VERSION", "Checkpointing", "DeviceKind",
    "EngineKind", "EntryPointWorkload", "FSDPMode", "GPTShape", "GPTWorkload", "HFWorkload",
    "HardwareFingerprint", "Launcher", "MemoryReport", "MemorySource", "Offload", "Precision",
    "TrainingKnobs", "TrialConfig", "TrialResult", "TrialStatus", "Workload",
    "deepspeed_buffer_sizes", "deepspeed_config", "default_launcher", "engine_for", "preset_names",
    "write_json_atomic",
]
