"""One sweep's context, built once: the spec, this machine's space, the catalog, the study and
where trials write. Every part of the search (the objective, the sweep loop's rules, racing,
local moves, the memory guard) receives it instead of rebuilding its own.

    ctx = SweepContext.build(spec, study, runs_dir=Path("autotune_runs/default"))
    ctx.hardware.key(), ctx.machine.restricted.num_gpus, ctx.catalog.offers_for("cpu")

`catalog=` and `machine=` take what a caller has already loaded or detected (the CLI checks the
catalog and the space before it opens the study; a benchmark replays another machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.contract import HardwareFingerprint
from autotune.search.machine import MachineSpace
from autotune.spec import SweepSpec

if TYPE_CHECKING:  # imported for types only: optuna and the catalog load lazily
    import optuna

    from autotune.pricing.catalog import Catalog


@dataclass(frozen=True)
class SweepContext:
    """What every rule of one sweep reads; nothing in it changes while the sweep runs."""

    spec: SweepSpec
    machine: MachineSpace
    catalog: "Catalog"
    study: "optuna.Study"
    runs_dir: Path

    @property
    def hardware(self) -> HardwareFingerprint:
        return self.machine.hardware

    @classmethod
    def build(cls, spec: SweepSpec, study: "optuna.Study", runs_dir: Path,
              catalog: "Catalog | None" = None, machine: MachineSpace | None = None) -> "SweepContext":
        """The context of a sweep of `spec` on this machine (the catalog is loaded here when the
        caller has not loaded it)."""
        from autotune.pricing.load import load_catalog

        catalog = catalog if catalog is not None else load_catalog(spec.platforms.catalog)
        machine = machine if machine is not None else MachineSpace.for_spec(spec, catalog)
        return cls(spec, machine, catalog, study, Path(runs_dir))
