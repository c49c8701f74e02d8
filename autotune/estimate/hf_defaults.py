"""The sizes a Hugging Face config leaves out, as the worker's transformers fills them.

    cfg, filled = with_type_defaults({"model_type": "llama", "hidden_size": 2048})
    filled    # ["vocab_size", "intermediate_size", "num_hidden_layers", ...]: the table's order

A spec may name a model by `model_type` and a few `config_overrides`, and a config.json may
leave fields out; the trial's transformers then builds the model with its config class's
defaults (llama: an MLP 11008 wide, 32 layers, ...). The controller cannot import transformers
(it imports torch: the CLI stays free of it), so the defaults of the families the parameter
count knows exactly are written here. Source: the constructor defaults of each family's config
class in transformers 5.25.0 (`transformers/models/<family>/configuration_<family>.py`),
read 2026-12-07, only the fields the count reads. tests/test_hf_shape.py pins this table to the
installed transformers' classes and each family's count to the model it builds, so a release
that changes a default fails there rather than skewing an estimate.

A default of None there (llama's `num_key_value_heads`, `head_dim`: derived from the heads and
hidden size) is left out here, and the count derives it the same way.
"""

from __future__ import annotations

from typing import Any

TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048, tie_word_embeddings=False,
                  hidden_act="silu", attention_bias=False, mlp_bias=False),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                    tie_word_embeddings=False, hidden_act="silu"),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768,
                  tie_word_embeddings=False, hidden_act="silu"),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                  max_position_embeddings=32768, tie_word_embeddings=False, hidden_act="silu",
                  attention_bias=False),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                 tie_word_embeddings=True),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, hidden_act="gelu", max_position_embeddings=2048,
                     tie_word_embeddings=False, attention_bias=True),
    # gpt_neo: GPT-Neo's 1.3B sizes; its MLP 4 x hidden where intermediate_size is None.
    "gpt_neo": dict(vocab_size=50257, hidden_size=2048, num_layers=24, num_heads=16,
                    max_position_embeddings=2048, tie_word_embeddings=True),
    "opt": dict(vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072,
                max_position_embeddings=2048, do_layer_norm_before=True, num_attention_heads=12,
                enable_bias=True, tie_word_embeddings=True),
    # Gemma: head_dim apart from hidden / heads (256 x 16 heads over a 3072 hidden), tied head.
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256,
                  hidden_act="gelu_pytorch_tanh", max_position_embeddings=8192,
                  tie_word_embeddings=True, attention_bias=False),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                   max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False),
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, hidden_act="silu", max_position_embeddings=4096,
                 tie_word_embeddings=False),
    # olmo and olmo2: llama's sizes over a 50304-word vocabulary; olmo's norms have no weights,
    # olmo2's follow the attention and the MLP. granite: llama's, with scalar multipliers.
    # Source: configuration_olmo.py, configuration_olmo2.py, configuration_granite.py, read 2026-12-07.
    "olmo": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048,
                 tie_word_embeddings=False, attention_bias=False),
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048,
                  tie_word_embeddings=False, attention_bias=False),
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048,
                    tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
    # Mixtures of experts: every layer's MLP (qwen*_moe: every decoder_sparse_step-th) is
    # num_experts MLPs of the expert width, num_experts_per_tok of them run for a token.
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                    max_position_embeddings=131072, tie_word_embeddings=False,
                    num_experts_per_tok=2, num_local_experts=8),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, hidden_act="silu",
                      max_position_embeddings=32768, tie_word_embeddings=False, decoder_sparse_step=1,
                      moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                      num_experts_per_tok=4, num_experts=60, qkv_bias=True),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, hidden_act="silu",
                      max_position_embeddings=32768, tie_word_embeddings=False, attention_bias=False,
                      decoder_sparse_step=1, moe_intermediate_size=768, num_experts_per_tok=8,
                      num_experts=128),
    # gpt_oss: every layer's MLP is num_local_experts experts intermediate_size wide, biased, as
    # its attention is (attention_bias). Source: configuration_gpt_oss.py, read 2026-12-07.
    "gpt_oss": dict(num_hidden_layers=36, num_local_experts=128, vocab_size=201088, hidden_size=2880,
                    intermediate_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8,
                    tie_word_embeddings=False, hidden_act="silu", max_position_embeddings=131072,
                    num_experts_per_tok=4, attention_bias=True),
    # deepseek_v2 / deepseek_v3: multi-head latent attention (q and key/value low-rank
    # projections), routed and shared experts after first_k_dense_replace dense layers (v2's
    # num_experts_per_tok defaults to None: left out, the count takes 1). Source:
    # configuration_deepseek_v2.py, configuration_deepseek_v3.py, read 2026-12-07.
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048,
                        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                        first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, n_routed_experts=64,
                        n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        moe_intermediate_size=1407),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                        n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512, q_lora_rank=1536,
                        qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
                        first_k_dense_replace=3, hidden_act="silu", max_position_embeddings=4096,
                        tie_word_embeddings=False, attention_bias=False),
}

# The names one field goes by across families (transformers' `attribute_map`: gpt2's n_embd is
# its hidden_size), the first set one read (autotune.estimate.hf_count); a default fills a field
# only where the config sets it under none of its names.
HIDDEN = ("hidden_size", "n_embd", "d_model", "word_embed_proj_dim")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")  # n_layers: mpt's, dbrx's
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads",  # n_heads: mpt's, dbrx's
         "attention_heads")  # xglm's
FFN = ("intermediate_size", "n_inner", "ffn_dim")
POSITIONS = ("max_position_embeddings", "n_positions")
KV_HEADS = ("num_key_value_heads", "multi_query_group_num")
ALIASES: tuple[tuple[str, ...], ...] = (HIDDEN, LAYERS, HEADS, FFN, POSITIONS, KV_HEADS)
# The expert count's two names, one field in mixtral and qwen3_moe (their attribute_map);
# qwen2_moe reads num_experts alone (a num_local_experts there is an unread extra field).
EXPERTS = ("num_local_experts", "num_experts")
TYPE_ALIASES: dict[str, tuple[tuple[str, ...], ...]] = {"mixtral": (EXPERTS,), "qwen3_moe": (EXPERTS,),
                                                         "gpt_oss": (EXPERTS,),
                                                         # their attribute_map: n_routed_experts
                                                         "deepseek_v2": (("n_routed_experts", "num_experts"),),
                                                         "deepseek_v3": (("n_routed_experts",
                                                                          "num_local_experts"),)}


# The families of the table the worker runs at tensor-parallel degree 1 only: their
# `base_model_tp_plan` (transformers 5.25.0, read 2026-12-07) is missing (gpt2, opt), uses
# styles trials/engines/tp.py does not run (deepseek_v2 / v3: `mla_kv_a_proj`), or splits no
# block (gpt_oss: its embedding only; every rank would run every block whole, so TP 2 holds
# and computes what one GPU does, on two).
# tests/test_hf_shape.py pins the set to the installed transformers' plans and the worker's
# styles. A family outside the table is left to its first trial (refused with the reason, then not tried again).
NO_TP = frozenset({"gpt2", "opt", "gpt_neo", "deepseek_v2", "deepseek_v3", "gpt_oss"})
# The families whose plan gathers a split output whole on every rank (`colwise_gather_output`,
# transformers 5.25.0, read 2026-12-07), as (attention, MLP): olmo2's q/k/v (its norms run
# over all heads), phi3's fused qkv and gate_up. What follows runs whole on every rank: its
# activations and the attention's FLOPs are not split. Pinned to the plans as NO_TP is.
TP_GATHERED: dict[str, tuple[bool, bool]] = {"olmo2": (True, False), "phi3": (True, True)}
# The families run at TP whose plan splits the input embedding by vocabulary rows
# (`embedding_rowwise`: gpt_neox's embed_in; its LM head, embed_out, stays whole). Pinned as NO_TP is.
TP_EMBEDDING = frozenset({"gpt_neox"})


# Fields whose null a config keeps (the constructor takes None as set): deepseek's q_lora_rank
# null is a plain q_proj (DeepSeek-V2-Lite), not the default 1536-wide low-rank query.
KEEPS_NULL = frozenset({"q_lora_rank"})


def names(field: str, model_type: str = "") -> tuple[str, ...]:
    """The names `field` goes by in a config of `model_type`, the one read first first."""
    groups = ALIASES + TYPE_ALIASES.get(model_type, ())
    return next((group for group in groups if field in group), (field,))


def with_type_defaults(cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The config with its model type's defaults (TYPE_DEFAULTS) in the fields it does not set
    under any of their names, and those fields (in the table's order, the constructor's); a type
    not in the table unchanged."""
    model_type = str(cfg.get("model_type", "")).lower()
    defaults = TYPE_DEFAULTS.get(model_type, {})
    filled = [f for f in defaults if all(cfg.get(n) is None if f not in KEEPS_NULL else n not in cfg
                                         for n in names(f, model_type))]
    return {**cfg, **{f: defaults[f] for f in filled}}, filled


# Families the worker trains with eager attention, which keeps the s x s scores: their
# PreTrainedModel (transformers 5.25.0, read 2026-12-07) does not support SDPA, so from_config
# falls back to eager (gemma2: SDPA cannot soft-cap; gpt_oss: its attention sinks; gpt_neo,
# bloom, mpt: their own attention code). The causal LMs of transformers' auto mapping without
# `_supports_sdpa`, less those with no attention (ATTENTION_FREE); tests/test_hf_shape.py pins
# both. gemma2's and gpt_oss's scores are counted to the byte; another family's with
# transformers' eager_attention_forward's count (approximate: before, none at all).
ATTENTION_FREE = frozenset({"falcon_mamba", "mamba", "mamba2", "rwkv", "xlstm"})
EAGER = frozenset({
    "big_bird", "bigbird_pegasus", "bloom", "cpmant", "deepseek_v4", "flint", "gemma2", "git", "got_ocr2",
    "gpt_neo", "gpt_neox_japanese", "gpt_oss", "granite_swa", "granitemoe_swa", "hy_v4", "inkling2_loop_text",
    "inkling2_text", "megatron-bert", "mimo_v2_flash", "mpt", "mvp", "openai-gpt", "prophetnet", "reformer",
    "rembert", "roformer", "trocr", "vaultgemma", "xglm", "xlm", "xlnet"})
