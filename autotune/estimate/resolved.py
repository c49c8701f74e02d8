"""A Hugging Face model of a family the count does not know, as the trials' transformers builds it.

    if needs_resolving(spec.workload):
        model = check_workload(spec)                 # autotune.run.preflight: ResolvedModel | None
        remember(spec.workload, model)
        write_to_study(study, spec.workload, model)   # a later report or export reads it back
    resolved_for(spec.workload)                      # what estimate.workload.model_from_workload counts

The count (autotune.estimate.hf_count) knows the defaults of the families in
autotune.estimate.hf_defaults, pinned to transformers 5.25.0. Another family given as a
`model_type` and a few overrides (OLMoE with a smaller hidden size, a Gemma 3 with fewer layers)
leaves out fields that only its transformers config class fills: read with llama's defaults,
the count was off by up to 99.9% in tests/test_resolved_model.py's families (qwen3_next's
512 experts counted as none), or it had no sizes at all and the sweep ran without a memory
prescreen. The controller cannot import transformers (it imports torch), so the preflight,
which runs in the trials' environment anyway, resolves the config there and builds it on the
meta device (`python -m trials.preflight CONFIG --model-out FILE`): its fields, every default
filled, and its parameter count, exact whatever the layout. The layout beyond that stays the
llama count's (approximate) and the source says so.

The study keeps it (user attribute RESOLVED_ATTR), so that `autotune report` and `export`,
other processes, count the same model as the sweep did; `autotune.search.study.open_study`
reads it back.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotune.errors import UserError

RESOLVED_ATTR = "autotune_resolved_model"  # study user attribute: {"workload": ..., "model": ...}


class ResolvedModel(BaseModel):
    """What the trials' transformers builds for a workload: its config's fields with every
    default filled, its parameter count (meta build) and the transformers version."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    fields: dict[str, Any]
    params: int
    block_params: int | None = None  # its largest decoder layer (None: no layer list found)
    largest_module_params: int | None = None  # the largest module's own tensors
    transformers: str | None = None

    @property
    def counted(self) -> dict[str, int]:
        """The ModelShape fields the build counts exactly."""
        exact = {"params": self.params, "block_params": self.block_params,
                 "largest_layer_params": self.largest_module_params}
        return {k: v for k, v in exact.items() if v is not None}

    @property
    def source(self) -> str:
        """How autotune.estimate.workload.model_from_resolved counts it (ModelShape.source)."""
        return (f"Hugging Face config ({self.family}; parameters, its largest layer and module: the "
                f"trials' {self._version} build, exact, its defaults as that transformers fills them; "
                "the rest approximate: counted with the llama layout)")

    @property
    def source_params_only(self) -> str:
        """The same, for a config with no layout the count reads (no attention heads, as a
        state-space model; sizes that vary by layer, as Gemma 3n's)."""
        return (f"Hugging Face config ({self.family}; parameters: the trials' {self._version} build, "
                "exact; no layout the count reads: activations not estimated)")

    @property
    def family(self) -> str:
        return str(self.fields.get("model_type") or "unknown type")

    @property
    def _version(self) -> str:
        return f"transformers {self.transformers}" if self.transformers else "transformers"


_resolved: dict[str, ResolvedModel] = {}  # by workload_key


def workload_key(workload: Any) -> str:
    """The workload as canonical JSON: copies of one workload (a spec's, a trial's) share it."""
    return json.dumps(workload.model_dump(mode="json"), sort_keys=True)


def needs_resolving(workload: Any) -> bool:
    """A Hugging Face workload of a family outside the count's defaults table. One whose config
    cannot be read here is not: the caller's own reading of it names the problem (a missing
    config.json, as workload.config_path), which a preflight would only say another way."""
    from autotune.contract import HFWorkload
    from autotune.estimate import hf_count, hf_defaults

    if not isinstance(workload, HFWorkload):
        return False
    try:
        source = workload.config_path or {"model_type": workload.model_type}
        cfg, _ = hf_count.read_hf_config(source, workload.config_overrides)
    except UserError:
        return False
    return str(cfg.get("model_type", "")).lower() not in hf_defaults.TYPE_DEFAULTS


def remember(workload: Any, model: ResolvedModel | None) -> None:
    """Count `workload` from `model` in this process from now on (None: nothing to remember)."""
    if model is not None:
        _resolved[workload_key(workload)] = model


def resolved_for(workload: Any) -> ResolvedModel | None:
    return _resolved.get(workload_key(workload))


def write_to_study(study: Any, workload: Any, model: ResolvedModel | None) -> None:
    if model is not None:
        study.set_user_attr(RESOLVED_ATTR, {"workload": workload_key(workload), "model": model.model_dump()})


def remember_from_study(study: Any) -> None:
    """What a sweep of this study resolved, known to this process too (nothing if it did not)."""
    stored = study.user_attrs.get(RESOLVED_ATTR)
    if isinstance(stored, dict) and isinstance(stored.get("workload"), str):
        try:
            _resolved[stored["workload"]] = ResolvedModel.model_validate(stored.get("model") or {})
        except ValueError:  # not one this version wrote: counted as without it
            pass
