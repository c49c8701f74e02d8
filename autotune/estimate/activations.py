"""Activation memory of a transformer layer, tensor by tensor (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", sec. 4), and what
checkpointing keeps or recomputes.

    parts = activation_parts(model, cfg)      # kept, recompute_transient, logits (bytes per rank)
    korthikanti_layer_bytes(s=2048, b=1, h=4096, a=32)   # the paper's closed form, checked in tests
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from autotune.contract import Checkpointing, Precision

if TYPE_CHECKING:
    from autotune.estimate.compute import ModelShape
    from autotune.estimate.hf_count import Norm

Attention = Literal["fused", "eager", "recompute"]


class ActivationConfig(Protocol):
    """What the activation model reads of a config (autotune.estimate.memory.MemoryConfig)."""

    seq_len: int
    micro_batch_size: int
    precision: Precision
    checkpointing: Checkpointing
    checkpoint_every: int
    tp_degree: int
    sequence_parallel: bool
    attention: Attention
    dropout: bool

    @property
    def resolved_engine(self) -> str: ...


def dtype_bytes(precision: Precision) -> int:
    """Bytes of one element in the compute dtype (fp8 training keeps bf16 activations)."""
    return 4 if precision is Precision.fp32 else 2


def norm_bytes(norm: Norm, residual_bytes: int, compute_bytes: int, readers: int = 1) -> tuple[int, int]:
    """(bytes per element, bytes per token) one norm before `readers` matmuls keeps for backward.

    LayerNorm: its input (the residual stream, `residual_bytes`) and its output, the matmuls'
    input (`compute_bytes`). transformers' RMSNorm (5.25.0, LlamaRMSNorm) runs
    `x.to(float32)`, `pow(2).mean`, `* rsqrt(.)`, `.to(x.dtype)`, `weight *`: autograd keeps the
    fp32 input (x itself where the stream is fp32, else a new fp32 copy: the 16-bit x is kept by
    no one), the fp32 1/rms per token, the normalised tensor in the stream's dtype (gemma's
    stays fp32: it multiplies by 1 + weight before casting back) and the output. Under
    autocast (a 16-bit compute dtype over an fp32 stream) that output is fp32 and each reading
    matmul casts its own 16-bit copy (autocast caches only the weights' casts): llama's q, k
    and v keep three, gate and up two. Measured with trials.measure.SavedTensorMeter on the
    worker's build (tests/test_hf_shape.py), per element of the hidden size:
    fp32 12 (LayerNorm 8); bf16 autocast 8 + 2 x readers (LayerNorm 6); bf16 weights 8
    (gemma 10; LayerNorm 4); and 4 bytes per token for the 1/rms."""
    r, c = residual_bytes, compute_bytes
    copies = readers if r != c else 1
    if norm == "layernorm":
        return r + c * copies, 0
    normed = 4 if norm == "gemma_rmsnorm" else r
    return 4 + normed + c * copies, 4


def layer_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1, *, ffn: int | None = None,
                           n_kv_heads: int | None = None, head_dim: int | None = None,
                           qk_norm: bool = False, gated_mlp: bool = False, norm: Norm = "layernorm",
                           norm_readers: tuple[int, int] = (1, 1), post_norms: bool = False,
                           residual_bytes: int = 2, compute_bytes: int = 2,
                           attention: Attention = "eager", dropout: bool = True,
                           sequence_parallel: bool = False) -> float:
    """Bytes one transformer layer keeps for backward, counted tensor by tensor.

    With Korthikanti's assumptions (16-bit everything, dropout, eager attention, 4h MLP)
    this is exactly sbh(34 + 5as/h) at t=1, sbh(10 + 24/t + 5as/(ht)) with TP, and
    (sbh/t)(34 + 5as/h) with TP + sequence parallel (paper, eqs. 1-3). The parts:
    - not split by TP (unless sequence parallel): the two LayerNorm inputs (residual stream,
      `residual_bytes` each), the two LayerNorm outputs = inputs of the QKV and MLP-up
      matmuls (`compute_bytes`), and with dropout the two 1-byte masks after attention and MLP;
      an RMSNorm keeps more (`norm_bytes`, `norm_readers` the matmuls reading the attention's
      and the MLP's norm); `post_norms` (gemma2) adds a norm after the attention and the MLP,
      whose fp32 input copy and fp32 normalised tensor are kept (its output joins the stream;
      read off gemma's norm, not measured whole: the worker's gemma2 runs eager attention);
    - split by TP: Q, K, V; the attention output (input of the output projection); the MLP
      hidden tensors (GELU: input and output; SwiGLU: gate, its activation, up, product).
      Q and the attention output are heads x `head_dim` wide, K and V key/value heads x
      `head_dim` (default h / a: the paper's h; Qwen3-0.6B's 16 heads of 128 make Q 2048 wide
      over its 1024 hidden). `qk_norm` (qwen3): each Q and K head's RMSNorm keeps its input
      in fp32 (it normalises in fp32), its fp32 1/rms per head and its normalised output in
      the compute dtype (transformers 5.25.0 Qwen3RMSNorm);
    - attention core: eager stores the softmax output (+ dropout mask and output);
      fused (SDPA / flash) stores only a fp32 log-sum-exp per head and token;
      recompute (Korthikanti's selective recompute) stores nothing.
    """
    f = ffn if ffn is not None else 4 * h
    kv = n_kv_heads if n_kv_heads is not None else a
    hd = head_dim or h // a
    r, c = residual_bytes, compute_bytes
    sbh = s * b * h
    pre = [norm_bytes(norm, r, c, k) for k in norm_readers]
    post = 2 * (8 * sbh + 4 * s * b) if post_norms else 0
    unsplit = sbh * (sum(e for e, _ in pre) + (2 if dropout else 0)) + s * b * sum(n for _, n in pre) + post
    q_width, kv_width = a * hd, kv * hd
    qkv = s * b * (q_width + 2 * kv_width) * c
    attn_out = s * b * q_width * c
    qk_normed = s * b * ((q_width + kv_width) * (4 + c) + 4 * (a + kv)) if qk_norm else 0
    mlp = s * b * f * c * (4 if gated_mlp else 2)
    split = qkv + attn_out + qk_normed + mlp
    if attention == "eager":
        core = a * s * s * b * (c + ((1 + c) if dropout else 0))
    elif attention == "fused":
        core = 4 * a * s * b
    else:
        core = 0
    split += core
    # Gemma's norms keep their 1 + weight in fp32, whole on every rank (h wide, per norm).
    ones = 4 * h * (4 if post_norms else 2) if norm == "gemma_rmsnorm" else 0
    if sequence_parallel:
        return (unsplit + split) / t + ones
    return unsplit + split / t + ones


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1,
                            recompute: Literal["none", "selective", "full"] = "none",
                            sequence_parallel: bool = False) -> float:
    """The paper's closed forms (Korthikanti et al. 2022, Table 2), bytes per layer."""
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    if recompute == "selective":
        return 34.0 * sbh / t if sequence_parallel else sbh * (10 + 24 / t)
    if sequence_parallel:
        return sbh / t * (34 + 5 * a * s / h)
    if t == 1:
        return sbh * (34 + 5 * a * s / h)
    return sbh * (10 + 24 / t + 5 * a * s / (h * t))


def recomputed_layers(n_layers: int, checkpointing: Checkpointing, every: int) -> int:
    """How many blocks recompute their activations (the worker's rule: all, every k-th, none)."""
    if checkpointing is Checkpointing.full:
        return n_layers
    if checkpointing is Checkpointing.selective:
        return len(range(0, n_layers, max(1, every)))
    return 0


def model_level_bytes(model: ModelShape, s: int, b: int, residual_bytes: int) -> int:
    """What a transformers llama-family model keeps outside its blocks (an RMSNorm family,
    measured as `norm_bytes`): RoPE's cos and sin (s x head width, in the stream's dtype, one
    pair shared by every layer), the int64 token ids (the embedding's) and targets (the loss's),
    the loss's fp32 token count; gemma: the final norm's fp32 1 + weight and the embedding
    scale (in the weights' dtype). Whole on every TP rank. The LayerNorm models keep their
    figures (the built-in GPT's are pinned in tests/test_estimate.py)."""
    if model.norm == "layernorm":
        return 0
    kept = 2 * s * (model.head_width or 0) * residual_bytes + 2 * s * b * 8 + 4
    if model.norm == "gemma_rmsnorm":
        kept += 4 * (model.d_model or 0) + residual_bytes
    return kept


def activation_parts(model: ModelShape, cfg: ActivationConfig) -> dict[str, int] | None:
    """Activation bytes per rank: `kept` for backward by the blocks and the final norm
    (what a saved-tensor meter sees), `recompute_transient` (one recomputed block's full set
    during backward), `kept_logits` (the fp32 log-softmax output) and `logits` (the loss's
    buffers at their peak).

    The built-in GPT and Hugging Face models train with torch SDPA (`attention="fused"`) and
    no dropout, so Korthikanti's 5as/h term and the dropout masks are not kept: with fused
    attention, the paper's selective recompute (recompute the attention core) saves nothing
    more, which is why autotune's `selective` means "recompute every k-th block whole".
    A recomputed block keeps only its input, and during backward one block at a time holds
    its full set again. Under torch autocast the residual stream stays fp32.
    """
    dims = model.dims()
    if dims is None:
        return None
    s, b, h, a, t = cfg.seq_len, cfg.micro_batch_size, dims.d_model, dims.n_heads, cfg.tp_degree
    c = dtype_bytes(cfg.precision)
    r = 4 if (cfg.precision is Precision.fp32 or cfg.resolved_engine == "ddp") else c
    full = layer_activation_bytes(
        s, b, h, a, t, ffn=model.ffn_hidden, n_kv_heads=model.n_kv_heads, head_dim=model.head_width,
        qk_norm=model.qk_norm, gated_mlp=model.gated_mlp, norm=model.norm,
        norm_readers=model.norm_readers, post_norms=model.post_norms, residual_bytes=r,
        compute_bytes=c, attention=cfg.attention, dropout=cfg.dropout,
        sequence_parallel=cfg.sequence_parallel)
    n_rec = recomputed_layers(dims.n_layers, cfg.checkpointing, cfg.checkpoint_every)
    kept_input = s * b * h * r / (t if cfg.sequence_parallel else 1)
    kept = (dims.n_layers - n_rec) * full + n_rec * kept_input
    per_element, per_token = norm_bytes(model.norm, r, c)  # the final norm: the LM head reads it
    kept += s * b * (h * per_element + per_token) + model_level_bytes(model, s, b, r)
    # Logits: the fp32 log-softmax output is kept for backward, and the backward of the loss
    # holds its gradient and the logits' gradient at once: 3 fp32 copies. Whole on every TP
    # rank: the LM head is not split (trials/engines/tp.py splits the blocks only).
    logits = 12 * s * b * dims.vocab_size
    return {"kept": int(kept), "recompute_transient": int(full if n_rec else 0),
            "kept_logits": int(logits / 3), "logits": int(logits)}


def activation_bytes(model: ModelShape, cfg: ActivationConfig) -> tuple[int | None, int | None]:
    """(activations at the backward peak, logits and loss buffers), bytes per rank; None
    without the model's shapes. See `activation_parts`."""
    parts = activation_parts(model, cfg)
    if parts is None:
        return None, None
    return parts["kept"] + parts["recompute_transient"], parts["logits"]
