"""The model a sweep's workload trains, as the estimates count it.

    model_from_workload(spec.workload)    # ModelShape, or None for a user entry point
    model_shape_for(spec.workload)        # the same, None where its config cannot be read

The built-in GPT from its shape; a Hugging Face config with the count of
autotune.estimate.hf_count (exact for the families of autotune.estimate.hf_defaults); a family
the count does not know, from what the trials' transformers built for it where a preflight
resolved it (autotune.estimate.resolved): its fields counted with the llama layout, and the
build's parameters, largest layer and module, exact. A composite config (Gemma 3, Llama 4,
Qwen3.5: a language model's fields under `text_config`, a vision tower beside it) is counted
from its language model, the build's parameters being all of it; one with no layout the count
reads (no attention heads, as a state-space model; sizes that vary by layer, as Gemma 3n's) by
its parameters alone, its activations not estimated.
"""

from __future__ import annotations

from typing import Any

from autotune.contract import GPTWorkload, HFWorkload
from autotune.errors import UserError, read_text_file
from autotune.estimate.compute import ModelShape, model_from_gpt_shape, model_from_hf_config, model_from_params
from autotune.estimate.resolved import ResolvedModel, resolved_for


def model_from_workload(workload: Any) -> ModelShape | None:
    """The model description of a sweep's workload (`autotune.contract` Workload): the built-in
    GPT's or a Hugging Face config's; None for a user entry point (no shape to reason about).
    UserError when a Hugging Face config cannot be read."""
    if isinstance(workload, GPTWorkload):
        return model_from_gpt_shape(workload.resolved_shape(), name=str(workload.preset or "gpt"))
    if isinstance(workload, HFWorkload):
        resolved = resolved_for(workload)
        if resolved is not None:  # a family the count does not know, as the trials build it
            return model_from_resolved(resolved)
        # The same config the worker builds (trials/workloads/hf.py, `load_config_dict`).
        if workload.config_path:
            # The spec's field, named with how it is read: the fix of `estimate --model` (a
            # preset name) is no fix for a spec carried away from its model's config.
            read_text_file(workload.config_file() or workload.config_path, "Hugging Face config",
                           fix="point workload.config_path at a local config.json (or the folder holding "
                               "one); a relative path is read from the spec file's folder")
            return model_from_hf_config(workload.config_path, workload.config_overrides)
        return model_from_hf_config({"model_type": workload.model_type}, workload.config_overrides)
    return None


def model_shape_for(workload: Any) -> ModelShape | None:
    """The model description the estimate needs, or None when the workload gives none (an
    entry point) or its config cannot be read (the trial then says why)."""
    try:
        return model_from_workload(workload)
    except UserError:
        return None


def model_from_resolved(resolved: ResolvedModel) -> ModelShape:
    """What the trials' transformers built: its fields (a composite config's `text_config`)
    with the llama layout, and what the build counts exactly (ResolvedModel.counted)."""
    for fields in (resolved.fields, resolved.fields.get("text_config")):
        if not isinstance(fields, dict):
            continue
        try:
            shape = model_from_hf_config(fields)
        except UserError:
            continue
        return shape.model_copy(update={**resolved.counted, "source": resolved.source})
    # No layout to read (no attention heads; sizes that vary by layer): its parameters alone.
    return model_from_params(resolved.params).model_copy(
        update={"name": resolved.family, "source": resolved.source_params_only})
