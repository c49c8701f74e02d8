"""Small REAL studies shared by tests/test_report.py and tests/test_export.py: built once per
test session by real `autotune sweep` runs (real launched trials on CPU ranks).

    s = ddp_study(tmp_path_factory)       # 3 trials: 1 or 2 ranks, micro 1-2, accumulation 2
    s = zero_study(tmp_path_factory)      # 1 trial: DeepSpeed ZeRO-2 on 2 ranks
    s = fsdp_study(tmp_path_factory)      # 1 trial: FSDP2 full_shard on 2 ranks
    s = selective_study(tmp_path_factory) # 1 trial: selective checkpointing (every 2nd block), 1 rank
    s.cli("report", "--json")             # the real CLI against that study
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SPEC = """\
workload: {{kind: gpt, preset: tiny}}
seq_len: 32
target: {{tokens: 1.0e7}}
space: {space}
trial: {{warmup_steps: 1, measure_steps: 2, max_measure_steps: 2, timeout_s: 240}}
platforms: {{catalog: {catalog}}}
study: {study}
storage: sqlite:///{db}
"""

DDP_SPACE = """\
num_gpus: [1, 2]
micro_batch_size: [1, 2]
grad_accum_steps: [2]
precision: [fp32]
checkpointing: [none]
"""

ZERO_SPACE = """\
num_gpus: [2]
micro_batch_size: [1]
grad_accum_steps: [2]
precision: [fp32]
checkpointing: [none]
zero_stage: [2]
"""

FSDP_SPACE = """\
num_gpus: [2]
micro_batch_size: [1]
grad_accum_steps: [2]
precision: [fp32]
checkpointing: [none]
fsdp: [full_shard]
"""

SELECTIVE_SPACE = """\
num_gpus: [1]
micro_batch_size: [1]
grad_accum_steps: [1]
precision: [fp32]
checkpointing: [selective]
"""


@dataclass
class Study:
    folder: Path
    name: str
    storage: str
    sweep_stdout: str

    def cli(self, *args: str, timeout: float = 300, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
        # env: more variables; one set to None is left out (as COLUMNS is from a log's).
        e = {k: v for k, v in {**os.environ, "COLUMNS": "200", **(env or {})}.items() if v is not None}
        return subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--study", self.name,
                               "--storage", self.storage], cwd=self.folder, capture_output=True,
                              text=True, timeout=timeout, env=e)


# A second CPU platform, so that offers differ in kind (spot: cheaper, slower by its
# interruptions). TEST DATA, not a real price.
TEST_SPOT_OFFER = {
    "name": "test-cpu-spot", "provider": "testcloud", "gpu": "cpu-core", "pricing": "spot",
    "gpus_per_node": 192, "price_usd_per_gpu_hour": 0.0178, "billing": "second",
    "interruptions_per_node_month": 30, "restart_hours": 0.5, "setup_hours": 0.1,
    "price_date": "2026-11-30", "price_source": "test data (tests/report_study.py), not a real price",
}


def write_test_catalog(folder: Path) -> Path:
    """The shipped catalog plus TEST_SPOT_OFFER."""
    import yaml

    from autotune.pricing.catalog import DEFAULT_CATALOG

    cat = yaml.safe_load(DEFAULT_CATALOG.read_text())
    cat["offers"].append(dict(TEST_SPOT_OFFER))
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump(cat, sort_keys=False))
    return path


_built: dict[str, Study] = {}


def _build(tmp_path_factory, name: str, space: str, trials: int) -> Study:
    if name in _built:  # one real sweep per session, whichever test module asks first
        return _built[name]
    folder = tmp_path_factory.mktemp(name)
    (folder / "space.yaml").write_text(space)
    db = folder / "study.db"
    (folder / "spec.yaml").write_text(SPEC.format(space=folder / "space.yaml", study=name, db=db,
                                                  catalog=write_test_catalog(folder)))
    p = subprocess.run([sys.executable, "-m", "autotune.cli", "sweep", "spec.yaml", "--trials", str(trials)],
                       cwd=folder, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 0, p.stdout + p.stderr
    _built[name] = Study(folder, name, f"sqlite:///{db}", p.stdout)
    return _built[name]


def ddp_study(tmp_path_factory) -> Study:
    return _build(tmp_path_factory, "ddp", DDP_SPACE, 3)


def zero_study(tmp_path_factory) -> Study:
    return _build(tmp_path_factory, "zero", ZERO_SPACE, 1)


def fsdp_study(tmp_path_factory) -> Study:
    return _build(tmp_path_factory, "fsdp", FSDP_SPACE, 1)


def selective_study(tmp_path_factory) -> Study:
    return _build(tmp_path_factory, "selective", SELECTIVE_SPACE, 1)
