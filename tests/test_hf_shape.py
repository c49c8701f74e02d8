"""The controller's model of a Hugging Face workload is the model the worker trains: the same
config.json (a folder stands for the one inside it) with the same `config_overrides` over it.
The controller reads the JSON itself (its path stays free of torch and transformers); the
worker's side is `trials.workloads.hf`, built here on the meta device (no weights, no network).
"""

from __future__ import annotations

import json

import pytest

from autotune.contract import HFWorkload
from autotune.errors import UserError
from autotune.estimate.compute import model_from_hf_config, model_from_workload
from autotune.search.calibration import model_shape_for

# A llama-style config.json of 4 layers; the overrides make it a 2-layer model of another width.
LLAMA = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
         "tie_word_embeddings": False}
OVERRIDES = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 172}
# gpt2 names its sizes n_layer / n_embd: an override by those names must win as well.
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 500,
        "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}


def _folder(tmp_path, cfg: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def _worker_shape(wl: HFWorkload) -> tuple[int, int, int]:
    """(parameters, layers, hidden size) of the model the worker builds for `wl`."""
    from trials.workloads import hf  # transformers: a test dependency ([test] extra), never skipped

    model, config = hf.build_hf_model(wl, meta=True)
    shape = hf.shape_of(config)
    assert shape is not None
    return sum(p.numel() for p in model.parameters()), shape["n_layers"], shape["d_model"]


def test_overrides_are_modelled(tmp_path):
    wl = HFWorkload(config_path=str(tmp_path / "config.json"), config_overrides=OVERRIDES)
    _folder(tmp_path, LLAMA)
    m = model_from_workload(wl)
    assert m is not None
    assert (m.n_layers, m.d_model, m.ffn_hidden) == (2, 64, 172)
    # An override wins over the file's field; the fields it leaves alone are the file's.
    assert (m.n_heads, m.n_kv_heads, m.vocab_size) == (4, 2, 1000)
    assert "config_overrides" in m.source
    # The 2-layer model, not the file's 4-layer one.
    assert m.params == model_from_hf_config({**LLAMA, **OVERRIDES}).params
    assert m.params < model_from_hf_config(tmp_path / "config.json").params


def test_a_folder_stands_for_its_config_json(tmp_path):
    folder = _folder(tmp_path, LLAMA)
    m = model_shape_for(HFWorkload(config_path=folder))
    assert m is not None, "a folder config_path turned the memory prescreen off"
    assert m.params == model_from_hf_config(tmp_path / "config.json").params
    assert m.source.startswith(f"Hugging Face config {tmp_path / 'config.json'}")
    with_overrides = model_from_workload(HFWorkload(config_path=folder, config_overrides=OVERRIDES))
    assert with_overrides is not None and with_overrides.n_layers == 2


def test_a_folder_without_config_json_says_so(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        model_from_hf_config(tmp_path)


@pytest.mark.parametrize("base,overrides", [(LLAMA, OVERRIDES), (LLAMA, {}),
                                            (GPT2, {"n_layer": 2, "n_embd": 32})])
def test_controller_and_worker_resolve_the_same_model(tmp_path, base, overrides):
    for path in (_folder(tmp_path, base), str(tmp_path / "config.json")):
        wl = HFWorkload(config_path=path, config_overrides=overrides)
        m = model_from_workload(wl)
        assert m is not None
        assert (m.params, m.n_layers, m.d_model) == _worker_shape(wl), path


def test_model_type_with_overrides_matches_the_worker():
    sizes = {k: v for k, v in LLAMA.items() if k != "model_type"}
    wl = HFWorkload(model_type="llama", config_overrides={**sizes, **OVERRIDES})
    m = model_from_workload(wl)
    assert m is not None
    assert (m.params, m.n_layers, m.d_model) == _worker_shape(wl)


def test_an_mlp_width_the_config_leaves_out_is_labelled_approximate():
    """A llama config without intermediate_size: the worker's transformers fills its type's
    default, which the controller does not know (it takes 4 x hidden), so the count says it is
    approximate; gpt2 takes 4 x hidden itself, so there it stays exact."""
    sizes = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}
    unstated = model_from_hf_config({"model_type": "llama", **sizes})
    assert "approximate: MLP width not in the config" in unstated.source
    assert _worker_shape(HFWorkload(model_type="llama", config_overrides=sizes))[0] != unstated.params
    stated = model_from_hf_config({"model_type": "llama", **sizes, "intermediate_size": 172})
    assert "exact count" in stated.source
    gpt2 = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}
    m = model_from_hf_config({"model_type": "gpt2", **gpt2})
    assert "exact count" in m.source and m.params == _worker_shape(HFWorkload(model_type="gpt2", config_overrides=gpt2))[0]


def test_a_config_given_as_fields_is_named_once():
    """A spec's model_type with overrides is read as fields: its source read "Hugging Face
    config config with config_overrides [...]" in plan's assumptions."""
    m = model_from_hf_config({"model_type": "llama"}, {"hidden_size": 256, "num_attention_heads": 4,
                                                       "num_hidden_layers": 2, "vocab_size": 1000})
    assert m.source.startswith("Hugging Face config with config_overrides ['hidden_size', "), m.source
    assert "config config" not in m.source
