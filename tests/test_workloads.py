"""Workloads: the built-in GPT, a Hugging Face causal LM from a config (random weights, never
a download), and a user entry point. Builders are checked in-process; one real trial of the
HF model shows checkpointing and FLOPs applied to it."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from autotune.contract import Checkpointing, EntryPointWorkload, HFWorkload, TrialStatus
from autotune.estimate.compute import flops_per_token, model_from_hf_config
from tests.fixtures.trials import FIXTURES, entry, run_many, tiny
from trials.errors import UnsupportedConfig
from trials.measure import SavedTensorMeter
from trials.workloads.build import apply_checkpointing, build_workload

LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, max_position_embeddings=128)
GPT2_CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256,
               "n_positions": 64}
CPU = torch.device("cpu")


def _loss(built) -> torch.Tensor:
    batch = next(built.batches)
    out = built.model(batch["input_ids"], labels=batch["labels"])
    return out.loss if hasattr(out, "loss") else out


def test_hf_from_model_type_and_overrides_trains_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    built = build_workload(tiny(workload=HFWorkload(model_type="llama", config_overrides=LLAMA)), CPU)
    assert built.kind == "hf" and built.shape == {"n_layers": 2, "d_model": 64, "attention_width": 64}
    assert built.params == sum(p.numel() for p in built.model.parameters())
    loss = _loss(built)
    loss.backward()
    assert torch.isfinite(loss) and abs(loss.item() - torch.log(torch.tensor(512.0)).item()) < 1.0


def test_hf_from_a_local_config_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2_CONFIG))
    built = build_workload(tiny(workload=HFWorkload(config_path=str(path))), CPU)
    assert type(built.model).__name__ == "GPT2LMHeadModel"
    assert built.shape == {"n_layers": 2, "d_model": 64, "attention_width": 64}
    # A folder holding config.json works too; overrides apply on top of the file.
    built = build_workload(tiny(workload=HFWorkload(config_path=str(tmp_path),
                                                    config_overrides={"n_layer": 3})), CPU)
    assert built.shape["n_layers"] == 3


def test_hf_selective_checkpointing_switches_every_kth_layer():
    cfg = tiny(workload=HFWorkload(model_type="llama", config_overrides={**LLAMA, "num_hidden_layers": 4}),
               checkpointing=Checkpointing.selective, checkpoint_every=2)
    built = build_workload(cfg, CPU)
    assert apply_checkpointing(built, cfg) == [0, 2]
    from trials.workloads.hf import decoder_layers

    flags = [layer.gradient_checkpointing for layer in decoder_layers(built.model, built.hf_config)]
    assert flags == [True, False, True, False]


@pytest.mark.parametrize("wl, words", [
    (HFWorkload(model_type="no_such_arch"), "does not know model_type"),
    (HFWorkload(config_path="/nonexistent/config.json"), "does not exist"),
])
def test_hf_bad_configs_are_unsupported_with_the_reason(wl, words):
    with pytest.raises(UnsupportedConfig, match=words):
        build_workload(tiny(workload=wl), CPU)


def test_hf_without_transformers_is_unsupported_saying_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(UnsupportedConfig, match=r"pip install 'autotune-llm\[hf\]'"):
        build_workload(tiny(workload=HFWorkload(model_type="llama")), CPU)


def test_entry_point_builds_with_info_and_restarts_a_list():
    wl = EntryPointWorkload(entry_point="entry_points:build_list", python_path=[FIXTURES],
                            kwargs={"n_batches": 2})
    built = build_workload(tiny(workload=wl), CPU)
    assert built.kind == "entry_point" and built.params == sum(p.numel() for p in built.model.parameters())
    firsts = [next(built.batches)["input_ids"] for _ in range(4)]
    assert torch.equal(firsts[0], firsts[2]) and torch.equal(firsts[1], firsts[3])


def test_entry_point_errors_name_the_entry_point():
    with pytest.raises(ImportError, match="python_path"):
        build_workload(tiny(workload=EntryPointWorkload(entry_point="no_such_module:build")), CPU)
    wl = EntryPointWorkload(entry_point="entry_points:nope", python_path=[FIXTURES])
    with pytest.raises(AttributeError, match="entry_points:nope"):
        build_workload(tiny(workload=wl), CPU)
    # A return that breaks the calling convention: the error the sweep stops at, by the
    # contract's name for it (autotune.search.budget.RepeatedError reads only that name).
    from autotune.contract.result import ENTRY_POINT_CONTRACT_ERROR
    from trials.errors import EntryPointContractError

    wl = EntryPointWorkload(entry_point="entry_points:build_model_only", python_path=[FIXTURES])
    with pytest.raises(EntryPointContractError, match="must return .model, batches."):
        build_workload(tiny(workload=wl), CPU)
    assert EntryPointContractError.__name__ == ENTRY_POINT_CONTRACT_ERROR
    wl = EntryPointWorkload(entry_point="entry_points:build", python_path=[FIXTURES])
    with pytest.raises(UnsupportedConfig, match="gradient_checkpointing_enable") as no_switch:
        cfg = tiny(workload=wl, checkpointing=Checkpointing.full)
        apply_checkpointing(build_workload(cfg, CPU), cfg)
    # The workload's own limit, for the sweep to stop proposing it: no switch, no checkpointing.
    assert no_switch.value.workload_allows == {"checkpointing": ["none"]}


def test_an_entry_point_whose_switch_has_no_every_n_layers_allows_full_checkpointing_only():
    """A model with transformers' switch from before 5.16 (no `every_n_layers`) runs `full`;
    `selective` stays unsupported, and the worker says `none` and `full` are what the workload
    runs."""
    wl = EntryPointWorkload(entry_point="entry_points:build", python_path=[FIXTURES])
    built = build_workload(tiny(workload=wl), CPU)
    built.model.gradient_checkpointing_enable = lambda gradient_checkpointing_kwargs=None: None
    assert apply_checkpointing(built, tiny(workload=wl, checkpointing=Checkpointing.full)) == []
    with pytest.raises(UnsupportedConfig, match="'selective'.*turns on full only.*checkpointing none or full") \
            as selective:
        apply_checkpointing(built, tiny(workload=wl, checkpointing=Checkpointing.selective))
    assert selective.value.workload_allows == {"checkpointing": ["none", "full"]}


def test_an_entry_points_hf_model_checkpoints_every_kth_layer_through_transformers_switch(tmp_path):
    """A user's own transformers model (a 4-layer GPT-2 from an entry point): selective
    checkpointing goes through the switch's `every_n_layers` (transformers >= 5.16, the test
    extra's floor), in a real trial, which runs and recomputes; full marks every layer.
    Before, selective was `unsupported` for any entry point."""
    wl = entry("build_hf")
    r = run_many({"sel": tiny(workload=wl, checkpointing=Checkpointing.selective, checkpoint_every=2)},
                 tmp_path)["sel"]
    assert r.status is TrialStatus.ok, f"{r.error_type}: {r.error}\n{r.log_tail}"
    assert r.observations["checkpointed_layers"] == [0, 2]
    assert r.observations["linear_forward_passes_per_micro_step"] > 1.1  # half the blocks run again
    full = tiny(workload=wl, checkpointing=Checkpointing.full)
    assert apply_checkpointing(build_workload(full, CPU), full) == [0, 1, 2, 3]


def test_meta_build_is_materialised_with_the_models_own_init_same_weights_each_time():
    """Built on the meta device, given memory module by module: the GPT's init (N(0, 0.02)
    weights, zero biases, LayerNorm ones), the same weights from the same seed, and the
    embedding (the largest tensor) initialised before the blocks."""
    from trials.workloads.gpt import GPT
    from trials.workloads.materialize import has_meta_tensors, init_order

    cfg = tiny()
    torch.manual_seed(cfg.seed)
    deferred = build_workload(cfg, CPU, deferred=True)
    assert deferred.built_as == "meta" and has_meta_tensors(deferred.model)
    names = {id(m): n for n, m in deferred.model.named_modules()}
    order = [names[id(m)] for m in init_order(deferred.model)]
    assert order.index("tok_emb") < order.index("blocks.0.attn.qkv") and order[-1] == ""
    torch.manual_seed(cfg.seed)
    a = build_workload(cfg, CPU).model
    torch.manual_seed(cfg.seed)
    b = build_workload(cfg, CPU).model
    assert isinstance(a, GPT) and not has_meta_tensors(a)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    qkv = a.blocks[0].attn.qkv
    assert abs(qkv.weight.std().item() - 0.02) < 0.002 and torch.all(qkv.bias == 0)
    assert torch.all(a.blocks[0].ln1.weight == 1)


# Run in a fresh interpreter, as a rank starts: what the worker imports before the build,
# then the build on the meta device and its materialisation; prints the modules it imported.
_BUILD_IMPORTS = """
import json, sys, torch
import trials.measure
from autotune.contract import TrialConfig
from trials.workloads.build import build_workload, import_workload_modules
from trials.workloads.materialize import ensure_materialized
cfg = TrialConfig.model_validate_json(sys.argv[1])
import_workload_modules(cfg)
before = set(sys.modules)
built = build_workload(cfg, torch.device("cpu"), deferred=True)
ensure_materialized(built.model, torch.device("cpu"), built.init_module)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("workload", [None, HFWorkload(model_type="llama", config_overrides=LLAMA)],
                         ids=["gpt", "hf llama"])
def test_the_build_imports_nothing_the_worker_did_not_import_before_it(workload):
    """A trial's build time and build memory are the model's: every module the build needs
    (torch._dynamo, which a meta-device init op pulls in; a transformers model's modeling
    module and what it imports) is imported before it, by import_workload_modules."""
    import subprocess

    cfg = tiny(**({"workload": workload} if workload else {}))
    out = subprocess.run([sys.executable, "-c", _BUILD_IMPORTS, cfg.model_dump_json()],
                         capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_entry_point_may_return_a_meta_model_with_its_init():
    wl = EntryPointWorkload(entry_point="entry_points:build_meta", python_path=[FIXTURES])
    deferred = build_workload(tiny(workload=wl), CPU, deferred=True)
    assert deferred.built_as == "meta" and deferred.init_module is not None
    built = build_workload(tiny(workload=wl), CPU)
    assert built.built_as == "device" and abs(built.model.up.weight.std().item() - 0.02) < 0.003
    assert torch.isfinite(_loss(built))


@pytest.fixture(scope="module")
def hf_trial(tmp_path_factory):
    cfg = tiny(workload=HFWorkload(model_type="llama", config_overrides=LLAMA),
               checkpointing=Checkpointing.full)
    return run_many({"hf": cfg}, tmp_path_factory.mktemp("hf"))["hf"], cfg


def test_hf_trial_runs_with_checkpointing_applied(hf_trial):
    r, cfg = hf_trial
    assert r.status is TrialStatus.ok, f"{r.error_type}: {r.error}\n{r.log_tail}"
    assert r.observations["checkpointed_layers"] == [0, 1]
    assert r.observations["linear_forward_passes_per_micro_step"] > 1.3  # recomputed
    # Llama's input embedding is untied: a lookup table, left out of 6N (as the estimate does).
    assert r.observations["matmul_params"] == r.params - LLAMA["vocab_size"] * LLAMA["hidden_size"]
    assert r.flops_per_token == pytest.approx(6 * r.observations["matmul_params"] + 12 * 2 * 64 * cfg.seq_len)
    model = model_from_hf_config({"model_type": "llama", **LLAMA})
    assert r.flops_per_token == pytest.approx(flops_per_token(model, cfg.seq_len))
    # Activation bytes below the same model's without checkpointing, measured here in-process
    # with the same meter.
    plain = build_workload(cfg.model_copy(update={"checkpointing": Checkpointing.none}), CPU)
    with SavedTensorMeter(plain.model) as m:
        _loss(plain).backward()
    assert r.observations["activation_saved_bytes"] < 0.7 * m.saved_bytes
