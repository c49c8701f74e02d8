"""Slots: disjoint device sets on one node, so that trials can run side by side without
sharing a GPU or a core.

    slots = pack_slots(visible_devices(DeviceKind.cpu), slot_size=1)   # [Slot(0, cpu, (0,)), ...]
    pack_slots([0, 1, 2, 3, 4, 5, 6, 7], 2, kind=DeviceKind.cuda)     # four 2-GPU slots
    env = slot_env(slots[1], os.environ)       # CUDA_VISIBLE_DEVICES on GPUs; threads on CPU
    pin_to(slots[1])                           # this process (and its children) on its cores

A slot holds the largest trial of the space: on GPUs `max num_gpus` devices, on CPU
`max num_gpus x threads_per_rank` cores (a CPU "GPU" is a rank of `threads_per_rank` threads).
8 GPUs and 2-GPU trials give four slots, 1-GPU trials eight. Slots take consecutive devices
(on GPUs, neighbours in the index order usually share a switch or NVLink island; on CPU,
consecutive cores share a cache more often than distant ones).

GPUs are pinned through `CUDA_VISIBLE_DEVICES` (indices relative to what this process sees, so
that a sweep inside an allocation of 4 of 8 GPUs stays inside it), cores through the scheduler's
affinity mask, which every child process inherits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from autotune.contract import DeviceKind
from autotune.errors import UserError

CUDA_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Slot:
    """One disjoint device set: GPU indices (as CUDA_VISIBLE_DEVICES names them) or CPU cores."""

    index: int
    kind: DeviceKind
    devices: tuple[int, ...]

    def label(self) -> str:
        """'cores 0-1' / 'gpus 2,3': how reports name it."""
        what = "cores" if self.kind is DeviceKind.cpu else "gpus"
        d = self.devices
        if len(d) > 2 and d == tuple(range(d[0], d[-1] + 1)):
            return f"{what} {d[0]}-{d[-1]}"
        return f"{what} {','.join(map(str, d))}"


def visible_devices(kind: DeviceKind, env: Mapping[str, str] | None = None,
                    device_count: int | None = None) -> list[int]:
    """The devices this process may use: on CPU its affinity mask; on GPUs the entries of
    CUDA_VISIBLE_DEVICES (integer indices only), else 0..device_count-1."""
    env = os.environ if env is None else env
    if kind is DeviceKind.cpu:
        try:
            return sorted(os.sched_getaffinity(0))
        except AttributeError:  # no affinity API (macOS): every core
            return list(range(os.cpu_count() or 1))
    given = env.get(CUDA_ENV)
    if given is None:
        return list(range(device_count or 0))
    parts = [p.strip() for p in given.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise UserError(f"{CUDA_ENV}={given!r} names devices by UUID",
                        fix=f"give {CUDA_ENV} as integer indices (e.g. 0,1,2,3) to run trials side by side")
    return [int(p) for p in parts]


def pack_slots(devices: list[int], slot_size: int, count: int | None = None,
               kind: DeviceKind = DeviceKind.cpu) -> list[Slot]:
    """`count` disjoint slots of `slot_size` consecutive entries of `devices` (None: as many
    as fit). UserError when fewer than `count` fit: naming what would."""
    if slot_size < 1:
        raise ValueError(f"slot_size must be >= 1, got {slot_size}")
    fit = len(devices) // slot_size
    if count is not None and count > fit:
        raise UserError(f"{count} trials side by side need {count} x {slot_size} devices; "
                        f"{len(devices)} are visible, room for {fit}",
                        fix=f"run at most {max(fit, 1)} side by side, or narrow the space to smaller "
                            "trials (fewer num_gpus, or fewer threads_per_rank on CPU)")
    n = fit if count is None else count
    return [Slot(i, kind, tuple(devices[i * slot_size:(i + 1) * slot_size]))
            for i in range(n)]


def slot_env(slot: Slot, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of a process that runs in `slot`: GPUs by CUDA_VISIBLE_DEVICES; on CPU
    the thread pools sized to the slot (the trial sets its own per rank; this covers what the
    controller itself imports)."""
    env = dict(base)
    if slot.kind is DeviceKind.cpu:
        env["OMP_NUM_THREADS"] = str(len(slot.devices))
    else:
        env[CUDA_ENV] = ",".join(map(str, slot.devices))
    return env


def pin_to(slot: Slot) -> None:
    """Run this process, and every process it starts, on the slot's cores (a no-op on GPUs,
    whose slot is the environment)."""
    if slot.kind is DeviceKind.cpu:
        os.sched_setaffinity(0, set(slot.devices))
