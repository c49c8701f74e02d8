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
from autotune.estimate.compute import model_from_hf_config
from autotune.estimate.workload import model_from_workload, model_shape_for

# A llama-style config.json of 4 layers; the overrides make it a 2-layer model of another width.
LLAMA = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
         "tie_word_embeddings": False}
OVERRIDES = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 172}
# gpt2 names its sizes n_layer / n_embd: an override by those names must win as well.
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 500,
        "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}


# Families whose layout is not llama's: counted with the llama layout before, as approximate
# (mixtral a dense mistral: Mixtral-8x7B's 46.7B parameters counted as 7.2B), each with sizes
# that exercise what sets it apart. Gemma: head_dim apart from hidden / heads, tied head; gemma2:
# four norms a layer; phi3: fused qkv and gate_up; the mixtures: experts, router, shared expert
# (qwen2_moe), dense layers among sparse ones (decoder_sparse_step, mlp_only_layers); olmo: no
# norm weights (clip_qkv adds none); olmo2: no norms before the sublayers, two after, and
# q_norm / k_norm over all heads (head_dim apart); granite: llama's layout, biased where
# mlp_bias says so (its multipliers add none).
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 100}
COUNTED_APART = {
    "gemma": [{**SMALL, "head_dim": 40, "attention_bias": True}],
    "gemma2": [{**SMALL, "num_hidden_layers": 3, "num_key_value_heads": 1, "head_dim": 24,
                "tie_word_embeddings": False}],
    "phi3": [{**SMALL, "num_attention_heads": 8, "intermediate_size": 200, "pad_token_id": 0,
              "eos_token_id": 0}],
    "mixtral": [{**SMALL, "intermediate_size": 88, "num_local_experts": 4, "num_experts_per_tok": 1},
                {**SMALL, "num_experts": 3, "head_dim": 32}],
    "qwen2_moe": [{**SMALL, "num_hidden_layers": 4, "intermediate_size": 88, "moe_intermediate_size": 24,
                   "shared_expert_intermediate_size": 40, "num_experts": 6, "num_experts_per_tok": 2,
                   "decoder_sparse_step": 2, "mlp_only_layers": [3], "qkv_bias": False},
                  {**SMALL, "num_experts": 0}],
    "qwen3_moe": [{**SMALL, "num_hidden_layers": 3, "moe_intermediate_size": 24, "num_experts": 5,
                   "num_experts_per_tok": 2, "head_dim": 32, "mlp_only_layers": [1],
                   "tie_word_embeddings": True},
                  {**SMALL, "num_local_experts": 3, "num_experts_per_tok": 2, "attention_bias": True}],
    "olmo": [{**SMALL, "attention_bias": True, "clip_qkv": 8.0, "eos_token_id": 0}],
    "olmo2": [{**SMALL, "head_dim": 24, "attention_bias": True, "eos_token_id": 0}],
    "granite": [{**SMALL, "attention_bias": True, "mlp_bias": True, "embedding_multiplier": 12.0,
                 "residual_multiplier": 0.22, "attention_multiplier": 0.0078125, "logits_scaling": 8.0}],
    # gpt_oss: biased q/k/v/o, a sink per head, a biased router, experts with biases (counted as
    # a dense llama before: gpt-oss-20b's 20.9B parameters as 2.39B).
    "gpt_oss": [{**SMALL, "intermediate_size": 40, "num_local_experts": 4, "num_experts_per_tok": 2,
                 "head_dim": 24},
                {**SMALL, "num_experts": 3, "num_experts_per_tok": 1, "attention_bias": False,
                 "tie_word_embeddings": True}],
    # deepseek_v2 / v3: multi-head latent attention (a plain q_proj where q_lora_rank is null,
    # else q_a_proj, its norm and q_b_proj), dense first layers, routed and shared experts
    # (counted as a dense llama before: DeepSeek-V3's 671B parameters as 38.6B).
    "deepseek_v2": [{**SMALL, "num_hidden_layers": 3, "intermediate_size": 88, "q_lora_rank": None,
                     "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 12,
                     "n_routed_experts": 5, "n_shared_experts": 2, "moe_intermediate_size": 24,
                     "num_experts_per_tok": 2, "first_k_dense_replace": 1, "mlp_bias": True},
                    {**SMALL, "q_lora_rank": 20, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                     "qk_rope_head_dim": 4, "v_head_dim": 8, "num_experts": 4, "n_shared_experts": 1,
                     "moe_intermediate_size": 16, "num_experts_per_tok": 2, "attention_bias": True}],
    "deepseek_v3": [{**SMALL, "num_hidden_layers": 3, "num_key_value_heads": 4, "intermediate_size": 88,
                     "q_lora_rank": 20, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                     "v_head_dim": 12, "n_routed_experts": 8, "n_group": 2, "topk_group": 1,
                     "n_shared_experts": 1, "moe_intermediate_size": 24, "num_experts_per_tok": 2,
                     "first_k_dense_replace": 1, "attention_bias": True}],
}


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


def test_a_config_that_leaves_sizes_out_counts_the_model_its_defaults_build():
    """A config (or a spec's model_type) that leaves sizes out is built by the worker's
    transformers at its family's defaults (llama: an MLP 11008 wide, 32 layers): the count fills
    the same defaults (autotune.estimate.hf_defaults) and equals the built model's, for every
    family it counts exactly: the model_type alone, and a few sizes without the MLP width. Before,
    the MLP width was taken as 4 x hidden and labelled approximate, and a bare model_type had no
    shape at all (no plan, no memory prescreen)."""
    from autotune.estimate.hf_defaults import TYPE_DEFAULTS

    assert set(COUNTED_APART) <= set(TYPE_DEFAULTS)
    for mt in TYPE_DEFAULTS:
        # 32 heads: a multiple of every family's default key/value heads (mistral 8, qwen2 32).
        sizes = ({"n_embd": 128, "n_layer": 2, "n_head": 32} if mt == "gpt2" else
                 {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 32})
        # phi3's default pad and end tokens (32000) must lie in the vocabulary to build it.
        tokens = {"pad_token_id": 0, "eos_token_id": 0} if mt == "phi3" else {}
        # deepseek_v3's default key/value heads are its 128 heads'.
        tokens |= {"num_key_value_heads": 32} if mt == "deepseek_v3" else {}
        # gpt_neo's attention_types name one kind per layer: as many as its layers.
        tokens |= {"attention_types": [[["global", "local"], 1]]} if mt == "gpt_neo" else {}
        for overrides in ({}, {**sizes, "vocab_size": 100, **tokens}):
            wl = HFWorkload(model_type=mt, config_overrides=overrides)
            m = model_from_workload(wl)
            assert m is not None and "exact count" in m.source, (mt, overrides)
            assert (m.params, m.n_layers, m.d_model) == _worker_shape(wl), (mt, overrides)
    # A family outside the table still says its count is approximate, and why.
    cohere = model_from_hf_config({"model_type": "cohere", "hidden_size": 64, "num_hidden_layers": 2,
                                   "num_attention_heads": 4, "vocab_size": 100})
    assert "approximate: counted with the llama layout, MLP width not in the config" in cohere.source


def test_the_shipped_defaults_are_the_installed_transformers_defaults():
    """autotune.estimate.hf_defaults copies transformers' config-class defaults (the controller
    cannot import transformers): each value equals the installed class's constructor default, and
    every size field the count reads that the class defaults (not None) is in the table."""
    import inspect

    from transformers import CONFIG_MAPPING

    from autotune.estimate.hf_defaults import ALIASES, TYPE_DEFAULTS

    read = {n for group in ALIASES for n in group} | {"vocab_size", "head_dim", "tie_word_embeddings",
                                                       "hidden_act", "attention_bias", "mlp_bias",
                                                       "do_layer_norm_before", "enable_bias",
                                                       "qkv_bias", "num_experts", "num_local_experts",
                                                       "num_experts_per_tok", "moe_intermediate_size",
                                                       "shared_expert_intermediate_size",
                                                       "decoder_sparse_step", "q_lora_rank", "kv_lora_rank",
                                                       "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                                       "n_routed_experts", "n_shared_experts",
                                                       "first_k_dense_replace"}
    assert set(COUNTED_APART) <= set(TYPE_DEFAULTS)
    for mt, table in TYPE_DEFAULTS.items():
        params = inspect.signature(CONFIG_MAPPING[mt].__init__).parameters
        installed = {k: p.default for k, p in params.items() if k in read and p.default is not None}
        assert table == installed, mt


def test_a_config_given_as_fields_is_named_once():
    """A spec's model_type with overrides is read as fields: its source read "Hugging Face
    config config with config_overrides [...]" in plan's assumptions."""
    m = model_from_hf_config({"model_type": "llama"}, {"hidden_size": 256, "num_attention_heads": 4,
                                                       "num_hidden_layers": 2, "vocab_size": 1000})
    assert m.source.startswith("Hugging Face config with config_overrides ['hidden_size', "), m.source
    assert "config config" not in m.source


@pytest.mark.parametrize("mt,overrides", [(mt, o) for mt, cases in COUNTED_APART.items() for o in cases])
def test_families_outside_the_llama_layout_count_the_model_the_worker_builds(mt, overrides):
    """Each family that differs from llama's layout, at sizes that exercise how: the count is the
    built model's, and says it is exact (before: the llama layout's count, labelled approximate)."""
    wl = HFWorkload(model_type=mt, config_overrides=overrides)
    m = model_from_workload(wl)
    assert m is not None and "exact count" in m.source, m and m.source
    assert (m.params, m.n_layers, m.d_model) == _worker_shape(wl)


@pytest.mark.parametrize("mt", ["olmo", "olmo2", "mistral", "granite"])
def test_mlp_bias_counts_only_where_the_family_reads_it(tmp_path, mt):
    """A config.json's keys are taken as written: an mlp_bias there biases llama's and granite's
    MLP, and no other exact family's, whose modeling files hard-code bias=False (before: every
    gated family counted 2 x intermediate + hidden more a layer)."""
    cfg = {"model_type": mt, **SMALL, "mlp_bias": True, "eos_token_id": 0, "intermediate_size": 88}
    wl = HFWorkload(config_path=_folder(tmp_path, cfg))
    m = model_from_workload(wl)
    assert m is not None and "exact count" in m.source
    assert (m.params, m.n_layers, m.d_model) == _worker_shape(wl)


def _routed_params(wl: HFWorkload) -> tuple[int, int]:
    """(all parameters, those one token runs) of the model the worker builds: a mixture's expert
    tensors (one row per expert) count num_experts_per_tok of their num_experts rows."""
    from trials.workloads import hf

    model, config = hf.build_hf_model(wl, meta=True)
    total = sum(p.numel() for p in model.parameters())
    skipped = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            n = sum(p.numel() for p in module.parameters(recurse=False))
            skipped += n * (module.num_experts - config.num_experts_per_tok) // module.num_experts
    return total, total - skipped


@pytest.mark.parametrize("mt,overrides", [("mixtral", {}), ("qwen2_moe", {}), ("qwen3_moe", {}),
                                          ("mixtral", COUNTED_APART["mixtral"][0]),
                                          ("gpt_oss", COUNTED_APART["gpt_oss"][0]),
                                          ("deepseek_v2", {**COUNTED_APART["deepseek_v2"][0], "first_k_dense_replace": 0}),
                                          ("deepseek_v3", {**COUNTED_APART["deepseek_v3"][0], "first_k_dense_replace": 0})])
def test_a_mixture_of_experts_holds_all_its_experts_and_computes_with_those_a_token_runs(mt, overrides):
    """`params` (what memory holds) is every expert; the FLOPs per token count the top-k experts
    a token is routed to (and the router, the shared expert), not all of them: Mixtral-8x7B's
    FLOPs from 46.7B parameters were 3.6x its 12.9B active ones."""
    from autotune.estimate.compute import flops_per_token, hardware_flops_per_token

    wl = HFWorkload(model_type=mt, config_overrides=overrides)
    m = model_from_workload(wl)
    assert m is not None
    assert (m.params, m.active_params) == _routed_params(wl)
    assert m.active_params < m.params
    if (mt, overrides) == ("mixtral", {}):  # the bare defaults are Mixtral-8x7B's shape
        assert (m.params, m.active_params) == (46_702_792_704, 12_879_925_248)
    active = m.active_params - m.lookup_params
    s = 1024
    # PaLM's 12 L H Q s, H heads of width Q (mixtral's and qwen*_moe's heads split the hidden
    # size; gpt_oss's are head_dim wide).
    assert m.n_heads and m.attention_width == m.n_heads * (m.head_width or 0)
    # deepseek's multi-head latent attention: the mean of its scores' and weighted sum's widths.
    mla = (overrides.get("qk_nope_head_dim", 0) + overrides.get("qk_rope_head_dim", 0) + overrides.get("v_head_dim", 0)) // 2
    assert m.attention_width == {"gpt_oss": m.n_heads * overrides.get("head_dim", 0),
                                 "deepseek_v2": m.n_heads * mla, "deepseek_v3": m.n_heads * mla}.get(mt, m.d_model)
    attention = 12 * m.n_layers * m.attention_width * s
    assert flops_per_token(m, s) == 6 * active + attention
    # Full recompute re-runs the blocks' forward (the LM head and final norm are no block's),
    # with the same top-k experts: not the experts a token skips (all experts: over 2x active).
    assert not m.tied_embeddings and m.vocab_size and m.d_model
    blocks = active - m.vocab_size * m.d_model - m.d_model
    assert hardware_flops_per_token(m, s, "full") == pytest.approx(
        6 * active + attention + blocks / active * (2 * active + attention / 3), rel=1e-12)


# gpt-oss-20b's config.json (openai/gpt-oss-20b), the fields the count reads.
GPT_OSS_20B = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 32,
               "num_experts_per_tok": 4, "vocab_size": 201088, "tie_word_embeddings": False,
               "attention_bias": True}


def test_gpt_oss_20b_counts_its_experts_and_trains_with_eager_attention():
    """gpt-oss-20b holds 20.9B parameters (the worker's meta build of its config.json: 20,914,757,184),
    4.19B of them run per token; transformers 5.25's gpt_oss refuses SDPA, so the worker trains
    it with eager attention, which keeps the s x s scores. Before: a dense llama of 2,392,806,720
    parameters (approximate) with SDPA's activations, which said it fit one H100 at seq 4096."""
    from autotune.estimate.memory import MemoryConfig, activation_parts
    from trials.workloads import hf

    m = model_from_hf_config(GPT_OSS_20B)
    assert (m.params, m.active_params) == (20_914_757_184, 4_187_440_704)
    assert "exact count" in m.source and "approximate" not in m.source  # its activations too
    _, config = hf.build_hf_model(HFWorkload(model_type="gpt_oss", config_overrides=COUNTED_APART["gpt_oss"][0]),
                                  meta=True)
    assert config._attn_implementation == "eager" == m.attention
    cfg = MemoryConfig(seq_len=4096, micro_batch_size=1, precision="bf16")
    parts = activation_parts(m, cfg)  # autocast over fp32 weights: fp32 softmax over s + 1, a bf16 copy
    assert parts and parts["kept"] > 24 * 64 * 4096 * (4097 * 4 + 4096 * 2)


# DeepSeek-V3's and DeepSeek-V2-Lite's config.json, the fields the count reads.
MLA = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
       "tie_word_embeddings": False}
DEEPSEEK_V3 = {**MLA, "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "vocab_size": 129280}
DEEPSEEK_V2_LITE = {**MLA, "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
                    "num_experts_per_tok": 6, "first_k_dense_replace": 1, "q_lora_rank": None,
                    "vocab_size": 102400}


@pytest.mark.parametrize("cfg,params", [(DEEPSEEK_V3, 671_026_404_352), (DEEPSEEK_V2_LITE, 15_706_484_224)])
def test_deepseek_counts_its_latent_attention_and_experts(cfg, params):
    """The worker's meta builds of DeepSeek-V3's and DeepSeek-V2-Lite's configs hold these
    parameters (a q_lora_rank of null is a plain q_proj, not the default's low-rank query), and
    the worker runs neither at TP > 1 (their plans' mla_kv_a_proj). Before: dense llamas of
    38.6B and 2.69B parameters."""
    m = model_from_hf_config(cfg)
    assert m.params == params and "exact count" in m.source
    assert m.tp_why is not None


# Heads wider than hidden / heads: 4 heads of 32 over a 64 hidden, as Qwen3-0.6B's 16 heads of
# 128 over its 1024 hidden and gemma-7b's 16 of 256 over 3072. llama reads head_dim too.
WIDE_HEADS = {**SMALL, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128,
              "head_dim": 32}


# Families the activation tests measure beyond llama's layout, at sizes that exercise them:
# phi3's fused qkv_proj / gate_up_proj (its end and pad tokens in the 256-word vocabulary);
# mixtral top-2 of 4 experts; qwen2_moe a shared expert and a dense layer among sparse ones;
# qwen3_moe a renormalising router (norm_topk_prob) and a dense first layer; gemma2 transformers'
# eager attention (it refuses SDPA) with its attention and final logit soft-capping, grouped
# K/V heads (repeat_kv copies them), its sliding window shorter than the sequence, and its four
# norms a layer; olmo its weightless LayerNorm and clip_qkv's in-place clamps; olmo2 its norms
# after the sublayers and over all of q's and k's heads; granite its scalar multipliers (kept by
# no one). olmo's and olmo2's end token in the vocabulary. gpt_oss its eager attention with
# sinks, its sliding window (every other layer) shorter than the sequence, its biased router and
# clamped swiglu experts.
FAMILIES = {"gemma2": {"sliding_window": 16},
            "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 48,
                        "sliding_window": 8},
            "gpt2": {"n_inner": 128, "bos_token_id": 0, "eos_token_id": 0,
                     "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
            "gpt_neo": {"intermediate_size": 128, "attention_types": [[["global", "local"], 1]], "window_size": 8,
                        "bos_token_id": 0, "eos_token_id": 0},
            "gpt_neox": {"intermediate_size": 128},
            "opt": {"ffn_dim": 128, "dropout": 0.0},
            "olmo": {"clip_qkv": 8.0, "eos_token_id": 0},
            "olmo2": {"eos_token_id": 0},
            "granite": {"embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                        "attention_multiplier": 0.0078125, "logits_scaling": 8.0},
            "phi3": {"pad_token_id": 0, "eos_token_id": 0},
            "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
            "qwen2_moe": {"num_hidden_layers": 3, "num_experts": 4, "num_experts_per_tok": 2,
                          "moe_intermediate_size": 48, "shared_expert_intermediate_size": 40,
                          "mlp_only_layers": [1]},
            "qwen3_moe": {"num_experts": 5, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                          "norm_topk_prob": True, "mlp_only_layers": [0]}}


# The three ways a trial holds a 16-bit step's tensors, as the estimate names them (precision,
# MemoryConfig.engine): fp32; bf16 autocast over fp32 weights (DDP, TP, accelerate: an fp32
# residual stream); bf16 weights (DeepSpeed bf16, FSDP2's bf16 gathers: all 16-bit).
# The plain LayerNorm families (gpt2, gpt_neox, opt) read no head_dim, key/value heads or
# intermediate_size of llama's: the same sizes by their own fields (FAMILIES), heads of 16.
PLAIN = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
         "max_position_embeddings": 128}


def _fields(mt: str, overrides: dict | None = None) -> dict:
    """The config fields the activation tests build `mt` from: WIDE_HEADS (PLAIN for gpt2,
    gpt_neox and opt), FAMILIES' and `overrides`."""
    return {**(PLAIN if mt in ("gpt2", "gpt_neo", "gpt_neox", "opt") else WIDE_HEADS), **FAMILIES.get(mt, {}),
            **(overrides or {})}


LAYOUTS = {"fp32": ("fp32", "ddp"), "autocast": ("bf16", "ddp"), "bf16": ("bf16", "deepspeed")}


def _saved_bytes(mt: str, s: int, b: int, layout: str = "fp32", overrides: dict | None = None,
                 checkpointing: tuple[str, int] | None = None) -> tuple[int, object]:
    """Bytes autograd saves in one forward + loss of the worker's `mt` model (WIDE_HEADS, with
    `overrides` and `checkpointing` (mode, every) as the worker applies them), as a trial's
    `activation_saved_bytes` counts them, in a LAYOUTS layout; and its config. Under autocast
    the meter also sees each matmul's bf16 copy of its weight, which the estimate counts as
    the weight cache (memory.py's weight_cache_bytes), not as activations: left out here
    (2 bytes a Linear weight element; not with checkpointing, whose recomputed casts it misses).
    gpt2's Conv1D (transformers.pytorch_utils) is no nn.Linear, but its torch.addmm(bias, x,
    weight) is autocast's too: the weight's bf16 copy is cached and kept alike, 2 bytes an
    element of its weight, which the weight cache counts (every parameter): left out too."""
    import torch

    from trials.measure import SavedTensorMeter
    from trials.workloads import hf

    wl = HFWorkload(model_type=mt, config_overrides=_fields(mt, overrides))
    model, config = hf.build_hf_model(wl)
    if checkpointing:
        hf.apply_checkpointing(model, config, *checkpointing)
    if layout == "bf16":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, WIDE_HEADS["vocab_size"], (b, s), generator=torch.Generator().manual_seed(0))
    autocast = layout == "autocast"
    held: list = []  # what the meter saw, kept alive to backward: a freed storage's address, reused
    # by a later tensor, would count once (deepseek's router frees in the forward what only chose
    # its groups: `_dead_router_bytes`)

    class Holding(SavedTensorMeter):
        def _pack(self, t):
            held.append(t)
            return super()._pack(t)

    with Holding(model) as meter, torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        model(input_ids=ids, labels=ids).loss.backward()
    casts = 0
    if autocast:  # nn.Linear weights, a mixture's router weight (F.linear), gpt2's Conv1D (addmm)
        assert not checkpointing
        casts = 2 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
                        or type(m).__name__.lower().endswith("topkrouter") or type(m).__name__ == "Conv1D")
    return meter.saved_bytes - casts, config


def _estimated(mt: str, s: int, b: int, layout: str = "fp32", overrides: dict | None = None,
               checkpointing: tuple[str, int] | None = None) -> dict[str, int]:
    """activation_parts of the same model, sequence and layout."""
    from autotune.estimate.memory import MemoryConfig, activation_parts

    precision, engine = LAYOUTS[layout]
    mode, every = checkpointing or ("none", 1)
    m = model_from_hf_config({"model_type": mt, **_fields(mt, overrides)})
    cfg = MemoryConfig(seq_len=s, micro_batch_size=b, precision=precision, engine=engine,
                       checkpointing=mode, checkpoint_every=every, device="cpu")  # as measured
    parts = activation_parts(m, cfg)
    assert parts is not None
    return parts


@pytest.mark.parametrize("mt", ["qwen3", "gemma", "llama", *FAMILIES])
def test_the_activation_estimate_counts_attention_at_the_heads_width(mt):
    """Q, K, V and the attention output are heads x head_dim wide, not hidden wide, and qwen3's
    q_norm / k_norm keep their input and output: the estimate took every width from the hidden
    size, 12.6% under what gemma and llama saved here and 30% under qwen3 (Qwen3-0.6B at
    micro-batch 1, seq 2048, bf16: 2,368 MiB estimated, now 3,717 MiB). With transformers'
    RMSNorm, RoPE and the loss's ids counted (activations.norm_bytes, model_level_bytes), the
    estimate is what autograd saves, to the byte (before: 11.8% low, 11.9% gemma, 9.4% qwen3).
    phi3's fused qkv_proj is kept whole and its attention output twice (attention_bytes); a
    mixture keeps its router's and experts' tensors (expert_bytes), tokens x top_k rows
    whichever experts the weights pick: before, 17.3% (phi3), 12.1% (mixtral), 12.8%
    (qwen2_moe) and 15.8% (qwen3_moe) under what they saved here. gemma2 runs transformers'
    eager attention, keeping its scores (activations.eager_scores_bytes) and its soft-capped
    logits: before, counted as SDPA, 29.9% under. olmo's weightless LayerNorm (fp32 mean and
    1/std, clip_qkv's copies of q, k, v), olmo2's norms after the sublayers and over all heads,
    granite's RMSNorm were counted as approximate LayerNorms: 17.1% (olmo, clipped), 29.6%
    (olmo2) and 11.8% (granite) under. gpt2, gpt_neox and opt (dropout off, FAMILIES) keep
    transformers' nn.LayerNorm's mean and 1/std, their ids, targets and learned positions (gpt2,
    opt) or partial-rotary cos and sin (gpt_neox), gpt2's gelu_new's five tensors, opt's relu's
    one, gpt_neox's rotated q and k besides its fused qkv and a copy of its attention output,
    and its parallel residual's input once (hf_count.PlainLayout): before, by Korthikanti's
    LayerNorm count, 28.9% (gpt2), 12.4% (gpt_neox) under and 14.2% (opt) over. gpt_oss's sink
    attention, fp32-normalised norms and clamped swiglu experts (autotune.estimate.family_layers):
    before, counted as the llama layout with gemma2's eager scores, 20.0% under."""
    s, b = 64, 2
    saved, config = _saved_bytes(mt, s, b)
    m = model_from_hf_config({"model_type": mt, **_fields(mt)})
    # The estimate's `attention` default is the one the worker runs: SDPA (fused), gemma2 eager.
    assert config._attn_implementation == {"fused": "sdpa", "eager": "eager"}[m.attention]
    assert (m.attention == "eager") == (mt in ("gemma2", "gpt_oss", "gpt_neo"))
    if mt.endswith(("_moe", "mixtral", "gpt_oss")):  # what the experts run: expert_bytes counts grouped_mm
        assert config._experts_implementation == "grouped_mm"
    parts = _estimated(mt, s, b)
    assert parts["kept"] + parts["kept_logits"] == saved
    qk_norm = {"qwen3": "head", "qwen3_moe": "head", "olmo2": "whole"}.get(mt, "none")
    plain = mt in ("gpt2", "gpt_neo", "gpt_neox", "opt")  # PLAIN: heads split the hidden size
    assert (m.head_width, m.attention_width, m.qk_norm) == ((16, 64) if plain else (32, 128)) + (qk_norm,)


@pytest.mark.parametrize("mt", ["llama", *FAMILIES, "deepseek_v2", "deepseek_v3"])
def test_the_activation_estimate_holds_at_micro_batch_1(mt):
    """transformers' loss pads its labels by one and flattens the shifted view: at micro-batch 1
    the view keeps the padded storage, s + 1 ids (at more, a copy of s x b). The estimate
    counted s x b at every micro-batch, 8 bytes under what autograd kept at 1 (the tests above
    run at 2)."""
    s, b = 16, 1
    fields = DEEPSEEK_SIZES.get(mt)  # the others: FAMILIES' fields
    saved, config = _saved_bytes(mt, s, b, overrides=fields)
    parts = _estimated(mt, s, b, overrides=fields)
    dead = _dead_router_bytes(config, s, b, None) if fields else 0  # deepseek's, counted apart
    assert parts["kept"] + parts["kept_logits"] == saved - dead


@pytest.mark.parametrize("mt,layout", [(mt, layout) for mt in ("llama", "gemma", "qwen3", *FAMILIES)
                                       for layout in ("autocast", "bf16")])
def test_the_activation_estimate_counts_what_rmsnorm_keeps_in_each_16_bit_layout(mt, layout):
    """transformers' RMSNorm normalises an fp32 copy: under bf16 weights the 16-bit input is
    kept by no one but its fp32 copy is (gemma keeps the normalised tensor fp32 too); under
    autocast its output is fp32 and q, k, v (gate, up) each keep their own bf16 cast of it.
    Before, a norm was Korthikanti's LayerNorm (input + output): 25.2% (autocast) and 18.9%
    (bf16 weights) under what llama saved here, gemma 25.3% / 25.5%, qwen3 19.9% / 14.3%.
    A mixture's experts run in the weights' dtype (grouped_mm is not autocast: fp32 under
    autocast), its router's softmax in fp32; qwen2_moe's shared expert reads the norm three
    more times. Before these were counted (autocast / bf16 weights): phi3 13.8% / 14.9%,
    mixtral 37.5% / 11.6%, qwen2_moe 28.7% / 11.8%, qwen3_moe 19.2% / 13.0% under; gemma2
    (eager attention, soft-capped) 31.9% / 33.7% under; olmo (clipped)
    14.2% / 23.8%, olmo2 38.2% / 46.6%, granite 16.5% / 18.9% under; by Korthikanti's
    LayerNorm count gpt2 24.1% / 26.4% under, gpt_neox 6.1% / 11.3% under, opt 1.3% under /
    12.0% over (opt's q, k, v read its norm apart: three bf16 copies under autocast); gpt_oss
    21.3% / 10.2% under. gpt2's Conv1D weight casts are the weight cache's (_saved_bytes)."""
    s, b = 64, 2
    parts = _estimated(mt, s, b, layout)
    assert parts["kept"] + parts["kept_logits"] == _saved_bytes(mt, s, b, layout)[0]


@pytest.mark.parametrize("mt,layout,mode", [(mt, layout, mode) for mt in ("llama", "gemma", "qwen2_moe", "gemma2",
                                                                         "olmo", "olmo2", "gpt2", "gpt_neox",
                                                                         "opt", "gpt_oss", "gpt_neo")
                                            for layout in ("fp32", "bf16") for mode in ("selective", "full")])
def test_the_rmsnorm_terms_follow_checkpointing(mt, layout, mode):
    """A recomputed layer keeps only its input, its norms' tensors among what it recomputes;
    the kept layers and the final norm keep theirs (3 layers, every 2nd recomputed: layers 0
    and 2). Under full checkpointing RoPE's cos and sin are held by the checkpoints as layer
    inputs, which the meter does not see: the estimate keeps them (they stay in memory).
    qwen2_moe's layer 1 is dense among sparse ones (FAMILIES): the estimate keeps the layer
    the worker keeps (before, every layer counted alike). olmo's and olmo2's cos and sin stay
    fp32 (their rotary embedding does not cast them). gpt2 and opt have no RoPE; gpt_neox's
    cos and sin are its partial rotary's, 4 wide (a quarter of its heads' 16); gpt_oss's half a
    head (its rotary embedding does not repeat the frequencies)."""
    s, b = 64, 2
    three = {"num_hidden_layers": 3, **({"attention_types": [[["global", "local", "global"], 1]]} if mt == "gpt_neo" else {})}
    parts = _estimated(mt, s, b, layout, three, (mode, 2))
    saved = _saved_bytes(mt, s, b, layout, three, (mode, 2))[0]
    fp32_rope = layout == "fp32" or mt in ("olmo", "olmo2")
    width = {"gpt2": 0, "opt": 0, "gpt_neo": 0, "gpt_neox": 4, "gpt_oss": 16}.get(mt, WIDE_HEADS["head_dim"])
    rope = 2 * s * width * (4 if fp32_rope else 2) if mode == "full" else 0
    assert parts["kept"] + parts["kept_logits"] - rope == saved
    assert parts["recompute_transient"] > 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gemma2_without_soft_capping_keeps_no_tanh(layout):
    """gemma2 soft-caps its attention scores and its final logits unless the config sets them
    null: each tanh's output is kept (a score or logit in the compute dtype), and without it
    not; the estimate follows the config (before: SDPA's log-sum-exp either way, 17.5% under
    uncapped in fp32, 24.7% autocast, 26.2% bf16 weights)."""
    s, b = 64, 2
    off = {"attn_logit_softcapping": None, "final_logit_softcapping": None}
    parts = _estimated("gemma2", s, b, layout, off)
    assert parts["kept"] + parts["kept_logits"] == _saved_bytes("gemma2", s, b, layout, off)[0]
    capped = _estimated("gemma2", s, b, layout)
    assert capped["kept"] > parts["kept"] and capped["kept_logits"] > parts["kept_logits"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gpt_oss_keeps_its_sink_scores_whole_whatever_its_sliding_window(layout):
    """gpt_oss's eager attention keeps, per query head and token, the softmax over its s scores
    and its sink (s + 1 wide, in the weights' dtype: the sinks are a parameter), the max's index
    and, where that dtype is not the compute dtype (autocast), a copy of the s scores: on every
    layer, its sliding window (layer 0 here, 8 tokens of 16) masking the scores, not shortening
    them; its norms keep their normalised tensor in fp32 (as olmo2's), its RoPE's cos and sin
    are half a head wide, its experts keep their clamped swiglu's five tensors and a fourth row
    order (the biases' expert ids). Before, counted as the llama layout with gemma2's eager
    scores: 21.8% (fp32), 24.5% (autocast), 25.5% (bf16 weights) under."""
    s, b = 16, 2
    window = {"sliding_window": 8}
    parts = _estimated("gpt_oss", s, b, layout, window)
    saved = _saved_bytes("gpt_oss", s, b, layout, window)
    assert saved[1].layer_types[0] == "sliding_attention" and s > 8
    assert parts["kept"] + parts["kept_logits"] == saved[0]
    assert saved[0] == _saved_bytes("gpt_oss", s, b, layout, {"sliding_window": 64})[0]


# deepseek at sizes that exercise its latent attention (q_lora_rank 20 for v3, a plain q_proj for
# v2; kv_lora_rank 16; qk_nope 8 + qk_rope 4 against v_head 8: unequal, as in the real models'
# 192 and 128), a dense first layer, v3's grouped sigmoid router (2 groups, 1 chosen) and v2's
# greedy softmax one, and shared experts.
DEEPSEEK_SIZES = {
    "deepseek_v3": {"num_key_value_heads": 4, "num_hidden_layers": 3, "q_lora_rank": 20, "kv_lora_rank": 16,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "head_dim": 4,
                    "n_routed_experts": 8, "n_group": 2, "topk_group": 1, "n_shared_experts": 1,
                    "moe_intermediate_size": 24, "num_experts_per_tok": 2, "first_k_dense_replace": 1},
    "deepseek_v2": {"num_key_value_heads": 4, "num_hidden_layers": 3, "q_lora_rank": None, "kv_lora_rank": 16,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "head_dim": 4,
                    "n_routed_experts": 5, "n_shared_experts": 2, "moe_intermediate_size": 24,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1}}
EQUAL_WIDTHS = {"v_head_dim": 12}  # qk_nope + qk_rope: torch's CPU flash kernel


def _dead_router_bytes(config, s: int, b: int, checkpointing: tuple[str, int] | None) -> int:
    """What deepseek's router saves only to choose its groups (v3 always, v2 where topk_method is
    group_limited_greedy): its top-k's outputs carry no gradient, so their graph, and what it
    saved, is freed in the forward. The meter (kept alive by _saved_bytes) counts it: v3 the
    int64 indices of the top 2 per group and of the chosen groups, and the bool mask per expert;
    v2 the group max's and the chosen groups' indices. In the sparse layers not recomputed."""
    v3 = config.model_type == "deepseek_v3"
    if not v3 and config.topk_method != "group_limited_greedy":
        return 0
    per = s * b * ((16 if v3 else 8) * config.n_group + 8 * config.topk_group + (config.n_routed_experts if v3 else 0))
    mode, every = checkpointing or ("none", 1)
    recomputed = {"none": range(0), "full": range(99), "selective": range(0, 99, every)}[mode]
    return per * sum(1 for i in range(config.num_hidden_layers)
                     if i >= config.first_k_dense_replace and i not in recomputed)


@pytest.mark.parametrize("mt,overrides,layout,mode", [
    *[(mt, {}, layout, mode) for mt in DEEPSEEK_SIZES for layout in LAYOUTS for mode in (None, "selective", "full")
      if not (mode and layout == "autocast")],
    *[(mt, EQUAL_WIDTHS, layout, None) for mt in DEEPSEEK_SIZES for layout in LAYOUTS],
    *[("deepseek_v2", {"topk_method": "group_limited_greedy", "n_group": 5, "topk_group": 2, "q_lora_rank": 20},
       layout, None) for layout in LAYOUTS],
    *[("deepseek_v3", {"norm_topk_prob": False, "n_group": 4, "topk_group": 2, "q_lora_rank": None},
       layout, None) for layout in LAYOUTS]])
def test_deepseek_activations_are_what_autograd_keeps(mt, overrides, layout, mode):
    """deepseek's latent attention and experts (autotune.estimate.family_layers: mla_bytes,
    deepseek_mlp_bytes), to the byte on CPU in each layout and checkpointing mode: its low-rank
    RMSNorms, torch SDPA's math kernel where v_head_dim is not qk_nope + qk_rope (fp32 copies
    of Q, K, V and the fp32 s x s softmax, whatever the layout) and the CPU flash kernel where
    it is (Q, K, kv_b_proj's output, the output twice, the log-sum-exp), v3's sigmoid router in
    the logits' dtype, v2's fp32 softmax, grouped_mm experts and shared experts; its norms
    llama's RMSNorm (before: counted as LayerNorm), v2's RoPE one complex64 freqs_cis. Before,
    counted as the llama layout at a head width of (qk_nope + qk_rope + v_head) / 2, under what
    autograd keeps here (unequal widths): at seq 16 v3 20.1% (fp32), 21.8% (autocast), 38.2%
    (bf16 weights), v2 15.6%, 18.8%, 34.1%; selective 16.7% / 32.7% (v3), 13.0% / 29.1% (v2);
    full 10.7% / 14.2%; at seq 64 up to 47.7% (v3) and 44.5% (v2). Full checkpointing: RoPE's
    cos and sin are held by the checkpoints (the estimate keeps them)."""
    s, b = 16, 2
    fields = {**DEEPSEEK_SIZES[mt], **overrides}
    ck = (mode, 2) if mode else None
    saved, config = _saved_bytes(mt, s, b, layout, fields, ck)
    parts = _estimated(mt, s, b, layout, fields, ck)
    m = model_from_hf_config({"model_type": mt, **_fields(mt, fields)})
    assert m.layout is not None
    rope = 2 * s * m.layout.rope_width * (4 if layout == "fp32" or mt == "deepseek_v2" else 2) if mode == "full" else 0
    assert config._attn_implementation == "sdpa"
    assert parts["kept"] + parts["kept_logits"] - rope == saved - _dead_router_bytes(config, s, b, ck)
    assert "approximate" not in m.source


def test_deepseek_unequal_head_widths_keep_the_scores():
    """Where v_head_dim is not qk_nope + qk_rope (DEEPSEEK_SIZES: 12 and 8) torch's CPU SDPA runs
    its math kernel and keeps the fp32 s x s softmax: the activations grow with s squared, by
    4 bytes a score (4 heads x s x s x b a layer) beyond the rest, which grows with s."""
    mt, b = "deepseek_v3", 2
    short, long_ = (_estimated(mt, s, b, "bf16", DEEPSEEK_SIZES[mt])["kept"] for s in (16, 32))
    eq_short, eq_long = (_estimated(mt, s, b, "bf16", {**DEEPSEEK_SIZES[mt], **EQUAL_WIDTHS})["kept"]
                         for s in (16, 32))
    scores = 3 * 4 * 4 * b * (32 * 32 - 2 * 16 * 16)  # 3 layers: the quadratic part of 4 bytes a score
    assert (long_ - 2 * short) - (eq_long - 2 * eq_short) == scores
    saved = _saved_bytes(mt, 32, b, "bf16", DEEPSEEK_SIZES[mt])
    assert long_ + _estimated(mt, 32, b, "bf16", DEEPSEEK_SIZES[mt])["kept_logits"] == \
        saved[0] - _dead_router_bytes(saved[1], 32, b, None)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_olmo_keeps_a_copy_of_q_k_and_v_only_where_it_clips_them(layout):
    """olmo's clip_qkv clamps q, k and v in place, and each clamp_ keeps a copy of its input (in
    the compute dtype); without clip_qkv (OlmoConfig's default, None) nothing is clamped. The
    estimate follows the config: to the byte either way."""
    s, b = 64, 2
    off = {"clip_qkv": None}
    parts = _estimated("olmo", s, b, layout, off)
    assert parts["kept"] + parts["kept_logits"] == _saved_bytes("olmo", s, b, layout, off)[0]
    clipped = _estimated("olmo", s, b, layout)["kept"]
    c = 4 if layout == "fp32" else 2
    q, kv = 4 * 32, 2 * 32  # WIDE_HEADS: 4 query heads, 2 key/value heads of 32
    assert clipped - parts["kept"] == 2 * s * b * (q + 2 * kv) * c  # 2 layers


def test_qk_norm_keeps_an_fp32_input_and_a_16_bit_output_under_autocast():
    """qwen3 is llama with q_norm / k_norm (WIDE_HEADS alike): under bf16 autocast its extra
    saved bytes are each norm's fp32 input and 1/rms and its bf16 output: (4 + 2) bytes a
    query and key element, as the estimate counts them."""
    s, b = 64, 2
    measured = _saved_bytes("qwen3", s, b, "autocast")[0] - _saved_bytes("llama", s, b, "autocast")[0]
    kept = [_estimated(mt, s, b, "autocast")["kept"] for mt in ("qwen3", "llama")]
    assert measured == kept[0] - kept[1] > 0


@pytest.mark.parametrize("mt,overrides", [("qwen3", WIDE_HEADS), ("gemma", WIDE_HEADS),
                                          ("llama", {**WIDE_HEADS, "head_dim": 16}), ("gpt2", GPT2),
                                          ("deepseek_v2", COUNTED_APART["deepseek_v2"][0]),
                                          ("deepseek_v3", COUNTED_APART["deepseek_v3"][0])])
def test_the_worker_and_the_estimate_take_the_flops_attention_width_alike(mt, overrides):
    """12 L H Q s (PaLM, Appendix B), H heads of width Q: the worker's MFU (its build's
    `shape_of`) and the estimate use one width, heads x head_dim, the hidden size where the
    heads split it (llama at 16, gpt2), twice it here for qwen3 and gemma."""
    from autotune.contract.flops import model_flops_per_token
    from autotune.estimate.compute import flops_per_token
    from trials.workloads import hf

    overrides = {k: v for k, v in overrides.items() if k != "model_type"}
    _, config = hf.build_hf_model(HFWorkload(model_type=mt, config_overrides=overrides), meta=True)
    shape = hf.shape_of(config)
    m = model_from_hf_config({"model_type": mt, **overrides})
    assert shape is not None and shape["attention_width"] == m.attention_width
    # deepseek: heads x the mean of qk_nope + qk_rope (12) and v_head (12), not transformers'
    # head_dim (qk_rope, 4: the RoPE's).
    assert m.attention_width == {"qwen3": 128, "gemma": 128, "deepseek_v2": 48, "deepseek_v3": 48}.get(mt, m.d_model)
    assert flops_per_token(m, 64) == model_flops_per_token(m.matmul_params, shape["n_layers"],
                                                           shape["attention_width"], 64)


def test_the_families_run_at_tp_1_only_are_those_whose_plan_the_worker_does_not_run():
    """hf_defaults.NO_TP, TP_GATHERED and TP_EMBEDDING copy what the installed transformers'
    plans and the worker's TP styles decide (the controller imports neither). A plan that
    splits no block (gpt_oss's names its embedding only) is run at TP 1: each rank would hold
    and run every block whole, TP 2 one GPU's work on two."""
    from transformers import AutoConfig

    from autotune.estimate.hf_defaults import NO_TP, TP_EMBEDDING, TP_GATHERED, TYPE_DEFAULTS
    from trials.engines.tp import GATHERED, SPLIT_STYLES, SUMMED

    for mt in TYPE_DEFAULTS:
        plan = AutoConfig.for_model(mt).base_model_tp_plan
        runs = (bool(plan) and set(plan.values()) <= {*SPLIT_STYLES, SUMMED}
                and any(p.startswith("layers.") for p in plan))
        assert (mt not in NO_TP) == runs, (mt, plan and sorted(set(plan.values())))
        if not runs:
            continue
        # ... and what the estimate reads of the plan: which outputs it gathers (the attention's
        # projections, the MLP's), and whether it splits the embedding.
        gathered = {p.split(".")[-2] for p, style in (plan or {}).items() if style in GATHERED}
        assert TP_GATHERED.get(mt, (False, False)) == (
            bool(gathered & {"self_attn", "attention"}), "mlp" in gathered), (mt, plan)
        assert (mt in TP_EMBEDDING) == any(s == "embedding_rowwise" for s in (plan or {}).values()), mt


def test_a_model_the_worker_does_not_split_is_planned_and_swept_at_tp_1_only(cli, tmp_path):
    import yaml

    from autotune.contract import HardwareFingerprint
    from autotune.estimate.compute import NO_TP_REASON
    from autotune.search.machine import restricted_space
    from autotune.spec import load_spec

    space = {"num_gpus": [8], "micro_batch_size": [1], "precision": ["bf16"], "tp_degree": [1, 2]}
    tps = {}
    for mt in ("llama", "opt"):
        path = tmp_path / f"{mt}.yaml"
        path.write_text(yaml.safe_dump({"workload": {"kind": "hf", "model_type": mt, "config_overrides": WIDE_HEADS},
                                        "seq_len": 64, "target": {"tokens": 1e9}, "space": space}))
        code, out, err = cli("plan", str(path), "--gpu", "h100-sxm", "--json", "--top", "100")
        assert code == 0, err
        doc = json.loads(out)
        tps[mt] = {"tp2" in b["config"].split() for b in doc["bills"]}
        # the plan says why, as the sweep does
        assert any(NO_TP_REASON in a for a in doc["assumptions"]) == (mt == "opt"), doc["assumptions"]
        rs = restricted_space(load_spec(path), HardwareFingerprint(device_kind="cuda", device_count=8))
        assert (rs.tp_degree, rs.why_dropped.get("tp_degree 2")) == (
            ([1, 2], None) if mt == "llama" else ([1], NO_TP_REASON)), mt
    assert tps == {"llama": {False, True}, "opt": {False}}


# gpt2's and opt's dropout at their transformers 5.25.0 defaults (FAMILIES sets it to 0): the
# worker builds the config as it is, so a trial trains with these on.
DEFAULT_DROPOUT = {"gpt2": {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}, "opt": {"dropout": 0.1}}


def test_the_dropout_fields_read_are_the_installed_transformers_defaults():
    """autotune.estimate.dropout reads each family's dropout fields at the defaults of the
    installed transformers' config classes (the controller imports neither), and
    DEFAULT_DROPOUT is gpt2's and opt's default."""
    from transformers import CONFIG_MAPPING

    from autotune.estimate.dropout import FIELDS, LLAMA_FIELDS, Dropouts, dropouts_of
    from autotune.estimate.hf_defaults import TYPE_DEFAULTS

    for mt in TYPE_DEFAULTS:
        installed = CONFIG_MAPPING[mt]()
        for field in FIELDS.get(mt, LLAMA_FIELDS):
            assert field is None or getattr(installed, field[0]) == field[1], (mt, field)
    for mt, fields in DEFAULT_DROPOUT.items():
        assert {k: getattr(CONFIG_MAPPING[mt](), k) for k in fields} == fields
    assert dropouts_of({}, "gpt2") == Dropouts(True, True, True)
    assert dropouts_of({}, "opt") == Dropouts(False, True, False)
    assert dropouts_of({"attention_dropout": 0.1}, "llama") == Dropouts(False, False, True)


@pytest.mark.parametrize("mt,layout", [(mt, layout) for mt in DEFAULT_DROPOUT for layout in LAYOUTS])
def test_gpt2_and_opt_at_their_default_dropout_keep_what_the_estimate_counts(mt, layout):
    """On CPU each dropout keeps its noise in its input's dtype (gpt2's embedding's in the
    stream's, the blocks' in the compute dtype), and gpt2's attention dropout sends torch's SDPA
    down its math path, which keeps fp32 q, k, v, scores, noise and dropped scores: to the byte
    (autotune.estimate.dropout). Before, the estimate left dropout out, as at dropout 0: gpt2
    1,388,036 / 847,364 / 762,884 bytes against 2,334,212 / 1,826,308 / 1,725,444 kept (fp32,
    bf16 autocast, bf16 weights), opt 864,260 / 651,268 / 501,252 against 995,332 / 716,804 /
    566,788."""
    s, b = 64, 2
    parts = _estimated(mt, s, b, layout, DEFAULT_DROPOUT[mt])
    assert parts["kept"] + parts["kept_logits"] == _saved_bytes(mt, s, b, layout, DEFAULT_DROPOUT[mt])[0]
    # A config that leaves the fields out is estimated at the same defaults.
    bare = {k: v for k, v in _fields(mt).items() if k not in DEFAULT_DROPOUT[mt]}
    from autotune.estimate.compute import model_from_hf_config as from_config

    assert from_config({"model_type": mt, **bare}).dropouts == from_config(
        {"model_type": mt, **_fields(mt, DEFAULT_DROPOUT[mt])}).dropouts != from_config(
        {"model_type": mt, **_fields(mt)}).dropouts


@pytest.mark.parametrize("mt,layout,mode", [(mt, layout, mode) for mt in DEFAULT_DROPOUT
                                            for layout in ("fp32", "bf16") for mode in ("selective", "full")])
def test_the_dropout_terms_follow_checkpointing(mt, layout, mode):
    """A recomputed layer keeps its input only, not its masks nor SDPA's math path's scores;
    gpt2's embedding dropout's mask stays (3 layers, every 2nd recomputed)."""
    s, b = 64, 2
    on = {**DEFAULT_DROPOUT[mt], "num_hidden_layers": 3}
    parts = _estimated(mt, s, b, layout, on, (mode, 2))
    assert parts["kept"] + parts["kept_logits"] == _saved_bytes(mt, s, b, layout, on, (mode, 2))[0]


@pytest.mark.parametrize("mt,overrides", [("opt", {"attention_dropout": 0.1}),
                                          ("gpt_neox", {"hidden_dropout": 0.1, "attention_dropout": 0.1}),
                                          ("llama", {"attention_dropout": 0.1}),
                                          ("phi3", {"attention_dropout": 0.1, "resid_pdrop": 0.1}),
                                          ("qwen3", {"attention_dropout": 0.1}),
                                          ("gemma2", {"attention_dropout": 0.1}),
                                          ("gpt_neo", {"embed_dropout": 0.1, "resid_dropout": 0.1, "attention_dropout": 0.1})])
def test_a_config_that_sets_attention_dropout_is_counted_on_its_attention_path(mt, overrides):
    """attention_dropout (0.0 by default in these families) is passed to SDPA in training: on
    CPU its math path keeps the scores (grouped K and V repeated to every query head, phi3's and
    gpt_neox's fused qkv no longer kept whole); gemma2's eager attention keeps the noise and the
    dropped probabilities. gpt_neox's hidden_dropout and phi3's resid_pdrop keep masks too."""
    s, b = 64, 2
    for layout in LAYOUTS:
        parts = _estimated(mt, s, b, layout, overrides)
        assert parts["kept"] + parts["kept_logits"] == _saved_bytes(mt, s, b, layout, overrides)[0], layout


def test_on_cuda_dropout_keeps_a_bool_mask_and_sdpa_no_scores():
    """Read from torch 2.13, not measured (no GPU here): on CUDA native_dropout keeps a 1-byte
    mask and flash / memory-efficient SDPA take dropout_p without materialising the scores; a
    trial's MemoryConfig is on its own device, `estimate` and `plan` on CUDA."""
    from autotune.contract import DeviceKind, TrialConfig
    from autotune.estimate.memory import MemoryConfig, activation_parts

    s, b, h = 64, 2, PLAIN["hidden_size"]
    kept = {}
    for fields in ({}, DEFAULT_DROPOUT["gpt2"]):
        m = model_from_hf_config({"model_type": "gpt2", **_fields("gpt2", fields)})
        parts = activation_parts(m, MemoryConfig(seq_len=s, micro_batch_size=b, precision="fp32"))
        assert parts is not None
        kept[bool(fields)] = parts["kept"]
    masks = 1 + 2 * PLAIN["num_hidden_layers"]  # the embedding's, two a block
    assert kept[True] - kept[False] == masks * s * b * h * 1
    assert MemoryConfig().device == "cuda"
    for device in DeviceKind:
        trial = TrialConfig(device=device, micro_batch_size=b)
        assert MemoryConfig.from_trial_config(trial).device == device.value


# Mixtures of families the count does not know (transformers 5.25.0 builds them), at small sizes,
# with the share of the built model's parameters the llama-layout count reaches: olmoe,
# granitemoe, glm4_moe and dots1 are llama's layout around their experts; llama4 and hunyuan
# add modules the count does not know of.
UNKNOWN_MOE = {
    "olmoe": ({"intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2}, 0.01),
    "granitemoe": ({"intermediate_size": 32, "num_local_experts": 8, "num_experts_per_tok": 2}, 0.01),
    "glm4_moe": ({"intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 8,
                  "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "head_dim": 16}, 0.01),
    "dots1": ({"intermediate_size": 128, "moe_intermediate_size": 32, "n_routed_experts": 8, "n_shared_experts": 1,
               "num_experts_per_tok": 2, "first_k_dense_replace": 1, "head_dim": 16}, 0.01),
    "ernie4_5_moe": ({"intermediate_size": 128, "moe_intermediate_size": 32, "moe_num_experts": 8, "moe_k": 2,
                      "moe_num_shared_experts": 1, "moe_layer_start_index": 1, "head_dim": 16,
                      "tie_word_embeddings": True}, 0.01),
    "llama4_text": ({"intermediate_size": 32, "intermediate_size_mlp": 64, "num_local_experts": 8,
                     "num_experts_per_tok": 1, "head_dim": 16}, 0.1),
    "hunyuan_v1_moe": ({"intermediate_size": 32, "num_experts": 8, "moe_topk": 2, "head_dim": 16}, 0.1),
}


@pytest.mark.parametrize("mt", sorted(UNKNOWN_MOE))
def test_a_mixture_of_a_family_the_count_does_not_know_counts_its_experts(mt):
    """A family outside the table that sets an expert count was one dense MLP a layer: OLMoE's
    64 experts counted as one (0.40 of this small olmoe's parameters, 0.37 of llama4's). Now
    its experts are counted, approximately (llama-layout experts), and the source says both."""
    overrides, rel = UNKNOWN_MOE[mt]
    wl = HFWorkload(model_type=mt, config_overrides={**SMALL, "hidden_act": "silu", "eos_token_id": 0,
                                                     "pad_token_id": 0, "bos_token_id": 0, **overrides})
    m = model_from_workload(wl)
    assert m is not None and "approximate" in m.source and "mixture of experts: 8 experts" in m.source, m
    assert m.params == pytest.approx(_worker_shape(wl)[0], rel=rel)
    assert m.active_params < m.params


def test_the_families_trained_with_eager_attention_are_those_transformers_gives_no_sdpa():
    """The estimate counted the s x s scores for gemma2 (and gpt_oss) only; gpt_neo, bloom, mpt
    and every other causal LM whose transformers model does not support SDPA train eagerly too
    (from_config's default falls back), and their estimate kept no scores at all. hf_defaults.EAGER
    is pinned to the installed transformers' auto mapping (the families with attention)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from autotune.estimate.hf_defaults import ATTENTION_FREE, EAGER

    no_sdpa = {mt for mt, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()
               if not getattr(getattr(transformers, cls), "_supports_sdpa", False)}
    assert EAGER == no_sdpa - ATTENTION_FREE and ATTENTION_FREE <= no_sdpa
    # gpt_neo at seq 512: its eager scores (a x s x s per layer) are most of what a layer keeps.
    cfg = {"model_type": "gpt_neo", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 100,
           "attention_types": [[["global", "local"], 1]], "max_position_embeddings": 512}
    from autotune.estimate.memory import MemoryConfig, estimate_memory

    m = model_from_hf_config(cfg)
    mem = estimate_memory(m, MemoryConfig(seq_len=512, micro_batch_size=1, precision="fp32"))
    assert m.attention == "eager" and (mem.activations_bytes or 0) > 2 * 4 * 512 * 512 * 4, mem


@pytest.mark.parametrize("mt", sorted(DEEPSEEK_SIZES))
def test_deepseek_on_cuda_is_counted_with_the_kernel_that_keeps_no_scores(mt):
    """On CPU the real models' widths (value narrower than query and key) run SDPA's math kernel,
    which keeps the s x s scores (measured above). On CUDA PyTorch runs the memory-efficient
    kernel there (sdp_utils.cpp: flash needs q, k and v equally wide, memory-efficient only q
    and k), which keeps none: counted so, read and not measured (the label says it). Counting
    CUDA as CPU put DeepSeek-V3 at seq 4096, mb 1, bf16 at 768.9 GiB of activations, about
    three times what CUDA keeps."""
    from autotune.estimate.memory import MemoryConfig, activation_parts

    m = model_from_hf_config({"model_type": mt, **_fields(mt, DEEPSEEK_SIZES[mt])})
    assert "memory-efficient kernel" in m.source

    def kept(s: int, device: str) -> int:
        parts = activation_parts(m, MemoryConfig(seq_len=s, micro_batch_size=2, precision="bf16", device=device))
        assert parts is not None
        return parts["kept"]

    # Growth with the sequence: linear on CUDA (its second difference 0), quadratic on CPU.
    assert kept(192, "cuda") - 2 * kept(128, "cuda") + kept(64, "cuda") == 0
    assert kept(192, "cpu") - 2 * kept(128, "cpu") + kept(64, "cpu") > 0
    assert kept(64, "cuda") < kept(64, "cpu")
