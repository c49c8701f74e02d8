"""Check a trial's workload before any trial runs: the HF config loads, the entry point imports.

    python -m trials.preflight CONFIG.json                  # exit 0, or exit 3 with the reason on stderr
    python -m trials.preflight CONFIG.json --model-out M.json   # an HF workload: also what it builds

Run once by the controller before a sweep (`autotune.run.preflight.check_workload`), in a
subprocess with the trials' environment, so that a missing config file or an import error in
the user's module ends the sweep at once with one message, instead of failing every trial the
same way, or a sequence longer than the model takes. Touches no device.

`--model-out`: the controller asks for it where its own count does not know the family
(autotune.estimate.resolved). The file holds the config's fields as this transformers fills
them (every default of the family's config class), and the parameter count of the model built
on the meta device (shapes only: no memory, no init; a second for an 80B mixture).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_BAD_WORKLOAD = 3


def check(cfg, model_out: Path | None = None) -> None:
    """Raise with the reason when the workload cannot be built; with `model_out`, write what an
    HF workload builds there."""
    from autotune.contract import EntryPointWorkload, HFWorkload

    wl = cfg.workload
    if isinstance(wl, HFWorkload):
        from trials.workloads.hf import build_hf_config, check_positions

        config = build_hf_config(wl)  # the config every trial builds
        check_positions(config, cfg.seq_len)
        if model_out is not None:
            write_model(wl, config, model_out)
    elif isinstance(wl, EntryPointWorkload):
        from trials.workloads.entry import load_function

        load_function(wl)


def write_model(wl, config, path: Path) -> None:
    """The resolved fields and, from the meta build, the parameters of the model, of its largest
    decoder layer (what FSDP2 gathers at a time) and of its largest single module, counting only
    the module's own tensors (what ZeRO-3 gathers at a time: an embedding, one projection, a
    layer's fused experts): autotune.estimate.resolved's ResolvedModel, as JSON."""
    import transformers

    from trials.workloads.hf import build_hf_model, decoder_layers

    model, _ = build_hf_model(wl, meta=True, config=config)

    def count(module, recurse: bool = True) -> int:
        return sum(p.numel() for p in module.parameters(recurse=recurse))

    layers = decoder_layers(model, config)
    path.write_text(json.dumps({
        "fields": json.loads(config.to_json_string(use_diff=False)), "params": count(model),
        "block_params": max(map(count, layers)) if layers else None,
        "largest_module_params": max(count(m, recurse=False) for m in model.modules()),
        "transformers": transformers.__version__}))


def main(argv: list[str] | None = None) -> int:
    from autotune.contract import TrialConfig

    ap = argparse.ArgumentParser(prog="python -m trials.preflight")
    ap.add_argument("config", type=Path, help="the trial's config.json")
    ap.add_argument("--model-out", type=Path, default=None, help="write what an HF workload builds here")
    args = ap.parse_args(argv)
    try:
        check(TrialConfig.read(args.config), args.model_out)
    except Exception as exc:  # noqa: BLE001 - every reason becomes one line for the controller
        print(f"{type(exc).__name__}: {exc}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_WORKLOAD
    return 0


if __name__ == "__main__":
    sys.exit(main())
