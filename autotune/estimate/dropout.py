"""What a Hugging Face config's dropout keeps for backward: the masks, and the attention SDPA
runs once attention dropout is on. Torch-free (the CLI imports it).

    d = dropouts_of({"model_type": "gpt2"}, "gpt2")   # Dropouts(embedding=True, residual=True, attention=True)
    unsplit, attn = dropout_layer_bytes(d, s=64, b=2, h=64, a=4, kv=4, hd=16, c=4, device="cpu")
    dropout_model_bytes(d, tokens=128, h=64, r=4, device="cpu")   # the embedding's mask

Where each family drops out, read from transformers 5.25.0's modeling files
(`transformers/models/<family>/modeling_<family>.py`): gpt2 after the embeddings (embd_pdrop),
after the attention's c_proj and the MLP's c_proj (resid_pdrop) and on the attention
probabilities (attn_pdrop, passed to SDPA as dropout_p in training only); opt after out_proj and
fc2 (dropout; its decoder drops nothing after the embeddings) and attention_dropout to SDPA;
gpt_neox after embed_in, dense and the MLP (hidden_dropout) and attention_dropout to SDPA; phi3
after o_proj and the MLP (resid_pdrop; its embd_pdrop is read by no module) and
attention_dropout; every other llama-layout family attention_dropout only (default 0.0).
`ModelShape.dropouts` holds the config's; the built-in GPT has none (MemoryConfig.dropout is
Korthikanti's count).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

Device = Literal["cpu", "cuda"]


class Dropouts(NamedTuple):
    """Which of a config's dropouts are on (probability > 0): `embedding` after the embeddings
    (on the residual stream), `residual` after the attention's and the MLP's output projections
    (two a layer), `attention` on the attention probabilities."""

    embedding: bool = False
    residual: bool = False
    attention: bool = False


# Each family's fields (embedding, residual, attention) and their transformers 5.25.0 defaults
# (configuration_<family>.py); None: the family has no such dropout. Any family not here: only
# attention_dropout (0.0), as every llama-layout family reads it.
FIELDS: dict[str, tuple[tuple[str, float] | None, ...]] = {
    "gpt2": (("embd_pdrop", 0.1), ("resid_pdrop", 0.1), ("attn_pdrop", 0.1)),
    "opt": (None, ("dropout", 0.1), ("attention_dropout", 0.0)),
    "gpt_neo": (("embed_dropout", 0.0), ("resid_dropout", 0.0), ("attention_dropout", 0.0)),
    "gpt_neox": (("hidden_dropout", 0.0), ("hidden_dropout", 0.0), ("attention_dropout", 0.0)),
    "phi3": (None, ("resid_pdrop", 0.0), ("attention_dropout", 0.0)),
}
LLAMA_FIELDS: tuple[tuple[str, float] | None, ...] = (None, None, ("attention_dropout", 0.0))


def dropouts_of(cfg: dict[str, Any], model_type: str) -> Dropouts:
    """The dropouts a config turns on (its family's defaults where it leaves a field out): the
    worker builds the model from the config as it is and trains it in train mode."""
    def on(field: tuple[str, float] | None) -> bool:
        if field is None:
            return False
        value = cfg.get(field[0], field[1])
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0

    return Dropouts(*(on(f) for f in FIELDS.get(model_type, LLAMA_FIELDS)))


def mask_bytes(input_bytes: int, device: Device) -> int:
    """Bytes an element of the mask one dropout keeps. CPU: F.dropout runs ATen's generic
    `_dropout` (its fused kernel is for CUDA-like devices only), which multiplies by a noise
    tensor in the input's dtype and keeps it (measured with SavedTensorMeter, torch 2.13). CUDA:
    `native_dropout` keeps a bool mask, 1 byte (read, not measured: no GPU here; torch 2.13's
    torch/_decomp/decompositions.py native_dropout mirrors the kernel's bool mask)."""
    return input_bytes if device == "cpu" else 1


def dropout_layer_bytes(d: Dropouts, s: int, b: int, h: int, a: int, kv: int, hd: int, c: int, device: Device, *,
                        r: int | None = None, fused_qkv: bool = False, eager: bool = False) -> tuple[int, int]:
    """(bytes beyond the dropout-free count, not split by TP; those split with the attention
    heads) one layer keeps, `c` bytes an element of the compute dtype, `r` of the residual
    stream's (default `c`).

    Residual dropouts: two masks `h` wide on the projections' outputs, which are in
    the compute dtype (under autocast too). Attention dropout: on CPU torch's SDPA leaves its
    flash kernel (dropout 0 only) for the math path (torch 2.13, attention.cpp
    _scaled_dot_product_attention_math), which upcasts 16-bit q, k, v to fp32 and keeps the
    fp32 scaled q, k (repeated to every query head) and v, the softmax output, the dropout's
    noise and its output (a x s x s x b each, fp32); it keeps no log-sum-exp and not the q, k,
    v the flash kernel kept (nor phi3's / gpt_neox's fused qkv whole, nor the attention
    output's second copy: the math output is copied once before the output projection). All
    measured with SavedTensorMeter on the worker's gpt2, opt, gpt_neox, llama and phi3 (CPU,
    torch 2.13, tests/test_hf_shape.py). On CUDA flash and memory-efficient SDPA take dropout_p
    and keep what they keep without it (and an RNG seed and offset, 16 bytes, left out): read
    from torch 2.13's sdp_utils, not measured. transformers' eager attention (gemma2) drops its
    probabilities in the query's dtype, the stream's (RoPE's cos and sin are in it: fp32 under
    autocast), keeping the mask, and the second matmul keeps the dropped tensor (or, under
    autocast, its 16-bit cast) in place of the softmax's cast it kept without dropout where
    16-bit: per score 8 / 4 / 2 bytes more in fp32 / bf16 autocast / bf16 weights, measured."""
    tokens, q_width, kv_width = s * b, a * hd, kv * hd
    unsplit = 2 * tokens * h * mask_bytes(c, device) if d.residual else 0
    if not d.attention:
        return unsplit, 0
    scores = a * s * s * b
    if eager:
        return unsplit, scores * (mask_bytes(r or c, device) + c - (c if c != 4 else 0))
    if device == "cuda":
        return unsplit, 0
    flash = tokens * ((q_width + 2 * kv_width) * c + 4 * a)
    if fused_qkv:
        flash += tokens * (2 * q_width + kv_width) * c
    return unsplit, 3 * scores * 4 + 3 * tokens * q_width * 4 - flash


def dropout_model_bytes(d: Dropouts, tokens: int, h: int, r: int, device: Device) -> int:
    """Bytes the embedding's dropout keeps outside the blocks: its mask on the residual stream
    (`r` bytes an element: fp32 under autocast, as the embedding runs in the weights' dtype)."""
    return tokens * h * mask_bytes(r, device) if d.embedding else 0
