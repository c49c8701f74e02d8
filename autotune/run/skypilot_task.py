"""SkyPilot tasks that measure other GPU types where they are: one task YAML per GPU type, each
running a sweep worker on that type, all writing into the same study.

    task = skypilot_task(catalog, "h100-sxm", 8, worker_argv, install="autotune-llm[postgres]==0.1.0")
    text = task_yaml(task)          # `autotune sweep --skypilot-task` writes it as skypilot/autotune-h100-sxmx8.yaml
    # then: AUTOTUNE_STORAGE=postgresql://... sky launch --secret AUTOTUNE_STORAGE skypilot/autotune-h100-sxmx8.yaml

`resources.any_of` lists every on-demand offer of the type in the catalog that rents that many
GPUs on one node, as SkyPilot infra (`cloud/region`) with the accelerator as that cloud spells it
(and the offer's instance type where that name covers two GPU types); SkyPilot launches the
cheapest one available. The storage URL is a SkyPilot secret (`secrets:
{AUTOTUNE_STORAGE: null}`: required, its value given at launch with `--secret`, kept out of
SkyPilot's logs and dashboard; docs.skypilot.co "Environment Variables and Secrets",
read 2026-12): it is never written into the file.
"""

from __future__ import annotations

import shlex

import yaml

from autotune.errors import UserError
from autotune.pricing.skypilot import ACCELERATOR_TYPES, CLOUD_ACCELERATOR_TYPES, PCIE_VARIANT

STORAGE_SECRET = "AUTOTUNE_STORAGE"  # autotune.run.storage.STORAGE_ENV: the worker reads it
# Providers of the catalog that SkyPilot launches on, by SkyPilot's cloud name (its `infra`
# prefixes, docs.skypilot.co "SkyPilot YAML", read 2026-12).
SKYPILOT_CLOUDS = {"aws": "aws", "gcp": "gcp", "azure": "azure", "lambda": "lambda",
                   "runpod": "runpod", "oci": "oci", "nebius": "nebius", "paperspace": "paperspace",
                   "fluidstack": "fluidstack", "cudo": "cudo", "vast": "vast", "do": "do"}


def accelerator_name(gpu: str, provider: str) -> str | None:
    """The catalog's GPU type as SkyPilot names it on `provider` (the reverse of the import
    tables in autotune.pricing.skypilot); None when SkyPilot has no name for it."""
    for (cloud, name), key in CLOUD_ACCELERATOR_TYPES.items():
        if cloud == provider and key == gpu:
            return name
    pcie = gpu in PCIE_VARIANT.values()  # named as its SXM part; the instance type tells them apart
    base = {v: k for k, v in PCIE_VARIANT.items()}.get(gpu, gpu)
    names = [n for n, key in ACCELERATOR_TYPES.items()
             if key == base and (provider, n) not in CLOUD_ACCELERATOR_TYPES]
    if provider == "runpod" and not pcie:  # RunPod spells its SXM parts "...-SXM"
        names = sorted(names, key=lambda n: not n.endswith("-SXM"))
    else:
        names = [n for n in names if not n.endswith("-SXM")]
    return names[0] if names else None


def resolve_gpu(catalog, name: str) -> str:
    """A catalog GPU type from its key, an alias or SkyPilot's name ("H100" -> h100-sxm)."""
    if name in catalog.gpus:
        return name
    key = catalog.match_device(name) or ACCELERATOR_TYPES.get(name)
    if key is not None and key in catalog.gpus:
        return key
    return catalog.gpu_type(name).name


def candidates(catalog, gpu: str, num_gpus: int) -> list[dict]:
    """SkyPilot `any_of` entries: every on-demand offer of `gpu` renting `num_gpus` on one node."""
    out = []
    for offer in catalog.offers_for(gpu):
        cloud = SKYPILOT_CLOUDS.get(offer.provider)
        acc = accelerator_name(gpu, offer.provider)
        if offer.pricing != "on-demand" or cloud is None or acc is None:
            continue
        sizes = [name for name, gpus, _ in offer.sizes() if gpus == num_gpus]
        if not sizes:
            continue
        # The instance type pins the part where the cloud's name covers two of the catalog's
        # types (Lambda's "H100" is an SXM and a PCIe instance); elsewhere it is left to
        # SkyPilot, whose check of an instance type needs its catalog (online).
        shared = any(o.provider == offer.provider and o.gpu != gpu
                     and accelerator_name(o.gpu, o.provider) == acc
                     and any(g == num_gpus for _, g, _ in o.sizes()) for o in catalog.offers)
        for region in offer.regions or [None]:
            entry = {"infra": f"{cloud}/{region}" if region else cloud, "accelerators": f"{acc}:{num_gpus}"}
            if shared and offer.instances:
                entry["instance_type"] = sizes[0]
            if entry not in out:
                out.append(entry)
    return out


def skypilot_task(catalog, gpu: str, num_gpus: int, worker_argv: list[str], install: str) -> dict:
    """The task (a dict, as the YAML holds it) running `worker_argv` on `num_gpus` of `gpu`."""
    entries = candidates(catalog, gpu, num_gpus)
    if not entries:
        sizes = sorted({g for o in catalog.offers_for(gpu) for _, g, _ in o.sizes()})
        raise UserError(f"no on-demand offer in the catalog rents {num_gpus} x {gpu} on one node "
                        "on a cloud SkyPilot launches",
                        fix=f"ask for a size it sells ({', '.join(map(str, sizes)) or 'none'} GPUs: "
                            f"--skypilot-task {gpu}:N), or add an offer to your --catalog")
    run = " ".join(shlex.quote(a) for a in worker_argv)
    return {
        "name": task_name(gpu, num_gpus),
        "resources": {"any_of": entries},
        "workdir": ".",
        "envs": {"AUTOTUNE_INSTALL": install},
        "secrets": {STORAGE_SECRET: None},
        "setup": 'pip install "$AUTOTUNE_INSTALL"',
        "run": run,
    }


def task_name(gpu: str, num_gpus: int) -> str:
    return f"autotune-{gpu}x{num_gpus}"


def task_yaml(task: dict) -> str:
    head = ("# Written by `autotune sweep --skypilot-task`: a sweep worker on this GPU type, writing\n"
            f"# into the shared study. Launch: sky launch --secret {STORAGE_SECRET} THIS_FILE\n"
            f"# with {STORAGE_SECRET} set in your shell (it is never stored in this file).\n")
    return head + yaml.safe_dump(task, sort_keys=False)
