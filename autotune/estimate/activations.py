"""Activation memory of a transformer layer, tensor by tensor (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", sec. 4), and what
checkpointing keeps or recomputes.

    parts = activation_parts(model, cfg)      # kept, recompute_transient, logits (bytes per rank)
    korthikanti_layer_bytes(s=2048, b=1, h=4096, a=32)   # the paper's closed form, checked in tests
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from autotune.contract import Checkpointing, Precision
from autotune.estimate import family_layers
from autotune.estimate.dropout import Device, dropout_layer_bytes, dropout_model_bytes

if TYPE_CHECKING:
    from autotune.estimate.compute import ModelShape
    from autotune.estimate.hf_count import Norm, QKNorm
    from autotune.estimate.hf_fields import Experts

Attention = Literal["fused", "eager", "recompute"]
# Whose eager attention: Korthikanti's (16-bit softmax, dropout) or transformers' (gemma2's).
EagerKernel = Literal["korthikanti", "transformers"]


class ActivationConfig(Protocol):
    """What the activation model reads of a config (autotune.estimate.memory.MemoryConfig)."""

    seq_len: int
    micro_batch_size: int
    precision: Precision
    checkpointing: Checkpointing
    checkpoint_every: int
    tp_degree: int
    sequence_parallel: bool
    attention: Attention | None  # None: the model's (ModelShape.attention)
    dropout: bool
    device: Device  # what dropout keeps differs (autotune.estimate.dropout)

    @property
    def resolved_engine(self) -> str: ...


def dtype_bytes(precision: Precision) -> int:
    """Bytes of one element in the compute dtype (fp8 training keeps bf16 activations)."""
    return 4 if precision is Precision.fp32 else 2


def read_bytes(residual_bytes: int, compute_bytes: int, readers: int = 1) -> int:
    """Bytes per element `readers` matmuls keep of one tensor of the stream's dtype
    (`residual_bytes`) they read: the tensor itself where it is in the compute dtype, else
    (autocast: a 16-bit compute dtype over an fp32 stream) each its own 16-bit copy (autocast
    caches only the weights' casts)."""
    return compute_bytes * (readers if residual_bytes != compute_bytes else 1)


def norm_bytes(norm: Norm, residual_bytes: int, compute_bytes: int, readers: int = 1) -> tuple[int, int]:
    """(bytes per element, bytes per token) one norm before `readers` matmuls keeps for backward.

    LayerNorm: its input (the residual stream, `residual_bytes`) and its output, the matmuls'
    input (`compute_bytes`). transformers' RMSNorm (5.25.0, LlamaRMSNorm) runs
    `x.to(float32)`, `pow(2).mean`, `* rsqrt(.)`, `.to(x.dtype)`, `weight *`: autograd keeps the
    fp32 input (x itself where the stream is fp32, else a new fp32 copy: the 16-bit x is kept by
    no one), the fp32 1/rms per token, the normalised tensor in the stream's dtype (gemma's
    stays fp32: it multiplies by 1 + weight before casting back, olmo2's by its weight) and the
    output, which the matmuls read (`read_bytes`: under autocast q, k and v keep three 16-bit
    copies, gate and up two). olmo's LayerNorm (no weight, no bias) runs F.layer_norm over an
    fp32 copy and casts back: it keeps the fp32 input, an fp32 mean and 1/std per token and the
    output. Measured with trials.measure.SavedTensorMeter on the worker's build
    (tests/test_hf_shape.py), per element of the hidden size: fp32 12 (LayerNorm 8, olmo 8);
    bf16 autocast 8 + 2 x readers (LayerNorm 6, olmo 4 + 2 x readers); bf16 weights 8 (gemma
    and olmo2 10; LayerNorm 4, olmo 6); and 4 bytes per token for the 1/rms (olmo 8).
    transformers' nn.LayerNorm (gpt2, gpt_neo, gpt_neox, opt: "hf_layernorm") keeps LayerNorm's input
    and output and a mean and 1/std per token in the dtype it runs in: fp32 (8 bytes) in fp32
    and under autocast (which runs it in fp32); under bf16 weights 4 on CPU, as measured
    (CUDA's kernel keeps them in fp32: 4 bytes a token more, not measured here)."""
    r, c = residual_bytes, compute_bytes
    output = read_bytes(r, c, readers)
    if norm == "layernorm":
        return r + output, 0
    if norm == "hf_layernorm":
        return r + output, 2 * r
    if norm == "olmo_layernorm":
        return 4 + output, 8
    normed = 4 if norm in ("gemma_rmsnorm", "olmo2_rmsnorm") else r
    return 4 + normed + output, 4


def attention_bytes(tokens: int, a: int, kv: int, hd: int, c: int, *, qk_norm: QKNorm = "none",
                    fused_qkv: bool = False, clip_qkv: bool = False) -> int:
    """Bytes one attention block keeps beyond its norm and core, `tokens` = s x b, `c` bytes an
    element: Q and K (rotated) and V, and the attention output, heads x `hd` wide (Q and the
    output `a` heads, K and V `kv`). `qk_norm` "head" (qwen3): each Q and K head's RMSNorm keeps
    its input in fp32 (it normalises in fp32), its fp32 1/rms per head and its normalised output
    in the compute dtype (transformers 5.25.0 Qwen3RMSNorm); "whole" (olmo2): one RMSNorm over
    all of Q's heads and one over K's keep their fp32 input, an fp32 1/rms per token each and
    the normalised tensor in fp32 (Olmo2RMSNorm multiplies by its weight before casting back;
    its output, rotated, is kept by no one). `clip_qkv` (olmo): q, k and v are clamped in
    place, and each clamp_ keeps a copy of its input. `fused_qkv` (phi3): q, k and v are
    slices of one qkv_proj output; V, a view of it, keeps it whole besides the rotated Q and K,
    and the rotation's output of a strided slice is laid out heads-major, so SDPA's output is
    too (CPU flash, CUDA flash and cuDNN allocate it like the query; CUDA's memory-efficient
    kernel, which fp32 uses, does not: there this counts one output too many) and the
    `.contiguous()` before o_proj keeps a second copy. Measured on the worker's tiny phi3 with
    SavedTensorMeter (CPU, torch 2.13): q + k wider and one more output than llama's layout."""
    q_width, kv_width = a * hd, kv * hd
    kept = tokens * (q_width + 2 * kv_width) * c + tokens * q_width * c
    if fused_qkv:
        kept += tokens * (q_width + kv_width) * c + tokens * q_width * c
    if qk_norm == "head":
        kept += tokens * ((q_width + kv_width) * (4 + c) + 4 * (a + kv))
    elif qk_norm == "whole":
        kept += tokens * ((q_width + kv_width) * (4 + 4) + 4 * 2)
    if clip_qkv:
        kept += tokens * (q_width + 2 * kv_width) * c
    return kept


def eager_scores_bytes(s: int, b: int, a: int, kv: int, hd: int, c: int, *, softcap: bool = False) -> int:
    """Bytes transformers' eager_attention_forward (5.25.0; gemma2's, which refuses SDPA) keeps
    for `b` sequences of `s` tokens beyond `attention_bytes`: repeat_kv copies K and V to every
    query head, and the score matmuls keep those copies (`a` heads wide, not `kv`); per score
    (a x s x s x b) the softmax's fp32 output, its copy in the compute dtype `c` that the
    second matmul reads (none in fp32), and with soft-capping (scores / cap, tanh, * cap) the
    tanh's output in `c`. The mask is added (nothing kept) and dropout is 0. Measured with
    SavedTensorMeter on the worker's tiny gemma2 (tests/test_hf_shape.py) in fp32, bf16
    autocast and bf16 weights: to the byte, per score 4 / 6 / 6 bytes, + 4 / 2 / 2 soft-capped."""
    scores = a * s * s * b
    per_score = 4 + (c if c != 4 else 0) + (c if softcap else 0)
    return scores * per_score + 2 * s * b * (a - kv) * hd * c


def expert_bytes(tokens: int, h: int, moe: Experts, compute_bytes: int, weight_bytes: int) -> int:
    """Bytes a mixture-of-experts MLP keeps for `tokens` tokens (transformers 5.25.0's router and
    grouped_mm experts, the worker's default `experts_implementation` on CPU and on CUDA SM80+).
    The router keeps its softmax (fp32) and the top-k indices (int64); a renormalising router
    (mixtral; norm_topk_prob) its fp32 sum and rescaled weights. Whichever experts a token picks,
    tokens x top_k rows are routed: the experts keep three int64 row orders (gather, weights,
    un-permute) and int32 offsets per expert, the gathered input rows, the fused gate_up output,
    the activation and the product (gate and up are views of gate_up), the down output and the
    routing weight per row (fp32 in mixtral, else the logits' dtype). The experts run in the
    weights' dtype (`weight_bytes`): grouped_mm is not autocast, so under autocast over fp32
    weights they run in fp32. A shared expert (qwen2_moe) keeps a gated MLP's four tensors, its
    sigmoid gate and its output. All sizes follow from tokens x top_k: measured with
    SavedTensorMeter to the byte on CPU (tests/test_hf_shape.py); CUDA runs the same ops
    (grouped_mm saves its input whatever the device), not measured there. Not counted: the
    load-balancing loss of a config with output_router_logits (off by default)."""
    k, e, c = moe.top_k, weight_bytes, compute_bytes
    rows = tokens * k
    router = tokens * (4 * moe.experts + 8 * k) + (tokens * 4 * (1 + k) if moe.normalise else 0)
    weight = 4 if moe.fp32_weights else c
    experts = 3 * 8 * rows + 4 * moe.experts + rows * (e * (2 * h + 4 * moe.width) + weight)
    shared = tokens * c * (4 * moe.shared_width + h + 1) if moe.shared_width else 0
    return router + experts + shared


def stream_bytes(cfg: ActivationConfig) -> int:
    """Bytes an element of the residual stream: fp32 in fp32 and under torch autocast (DDP's
    layout: fp32 weights), else the 16-bit dtype (DeepSpeed's and FSDP2's 16-bit weights)."""
    return 4 if (cfg.precision is Precision.fp32 or cfg.resolved_engine == "ddp") else dtype_bytes(cfg.precision)


def layer_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1, *, ffn: int | None = None,
                           n_kv_heads: int | None = None, head_dim: int | None = None,
                           qk_norm: QKNorm = "none", gated_mlp: bool = False, norm: Norm = "layernorm",
                           norm_readers: tuple[int, int] = (1, 1), pre_norms: bool = True,
                           post_norms: bool = False, clip_qkv: bool = False,
                           residual_bytes: int = 2, compute_bytes: int = 2,
                           attention: Attention = "eager", dropout: bool = True,
                           sequence_parallel: bool = False, fused_qkv: bool = False,
                           experts: Experts | None = None, eager_kernel: EagerKernel = "korthikanti",
                           softcap: bool = False, tp_gathered: tuple[bool, bool] = (False, False),
                           mlp_kept: int = 2, parallel_residual: bool = False,
                           dropout_extra: tuple[int, int] = (0, 0)) -> float:
    """Bytes one transformer layer keeps for backward, counted tensor by tensor.

    With Korthikanti's assumptions (16-bit everything, dropout, eager attention, 4h MLP)
    this is exactly sbh(34 + 5as/h) at t=1, sbh(10 + 24/t + 5as/(ht)) with TP, and
    (sbh/t)(34 + 5as/h) with TP + sequence parallel (paper, eqs. 1-3). The parts:
    - not split by TP (unless sequence parallel): the two LayerNorm inputs (residual stream,
      `residual_bytes` each), the two LayerNorm outputs = inputs of the QKV and MLP-up
      matmuls (`compute_bytes`), and with dropout the two 1-byte masks after attention and MLP;
      an RMSNorm keeps more (`norm_bytes`, `norm_readers` the matmuls reading the attention's
      and the MLP's norm); without `pre_norms` (olmo2) the matmuls read the stream itself
      (`read_bytes`); `post_norms` (gemma2, olmo2) adds a norm after the attention and the MLP,
      whose fp32 input copy and fp32 normalised tensor are kept (its output joins the stream;
      measured on the worker's gemma2 and olmo2 in all three layouts, tests/test_hf_shape.py);
      a mixture of `experts` (`expert_bytes`, in place of the MLP: transformers' TP plans
      leave the experts out, so every TP rank runs them whole);
    - split by TP: Q, K, V and the attention output (`attention_bytes`: heads x `head_dim`
      wide, default h / a); the MLP hidden tensors (GELU: input and output, or `mlp_kept`
      of them, hf_count.PlainLayout; SwiGLU: gate, its activation, up, product);
    - `parallel_residual` (gpt_neox): both norms read the layer's input, kept once;
    - `dropout_extra`: what a Hugging Face config's dropouts keep beyond the count without
      them (autotune.estimate.dropout.dropout_layer_bytes: not split by TP, split by heads);
    - attention core: eager stores the softmax output (+ dropout mask and output), as
      Korthikanti counts it, or with `eager_kernel="transformers"` what transformers' eager
      attention keeps (`eager_scores_bytes`, `softcap` its tanh; no dropout);
      fused (SDPA / flash) stores only a fp32 log-sum-exp per head and token;
      recompute (Korthikanti's selective recompute) stores nothing.
    """
    f = ffn if ffn is not None else 4 * h
    kv = n_kv_heads if n_kv_heads is not None else a
    r, c = residual_bytes, compute_bytes
    sbh = s * b * h
    if experts is not None:
        norm_readers = (norm_readers[0], experts.norm_readers)
    pre = [norm_bytes(norm, r, c, k) if pre_norms else (read_bytes(r, c, k), 0) for k in norm_readers]
    post = 2 * (8 * sbh + 4 * s * b) if post_norms else 0
    unsplit = sbh * (sum(e for e, _ in pre) + (2 if dropout else 0)) + s * b * sum(n for _, n in pre) + post
    unsplit += dropout_extra[0] - (sbh * r if parallel_residual else 0)
    attn = attention_bytes(s * b, a, kv, head_dim or h // a, c, qk_norm=qk_norm, fused_qkv=fused_qkv,
                           clip_qkv=clip_qkv)
    mlp = 0
    if experts is not None:
        unsplit += expert_bytes(s * b, h, experts, c, r)
    else:
        mlp = s * b * f * c * (4 if gated_mlp else mlp_kept)
    if attention == "eager" and eager_kernel == "transformers":
        attn += eager_scores_bytes(s, b, a, kv, head_dim or h // a, c, softcap=softcap)
    elif attention == "eager":
        attn += a * s * s * b * (c + ((1 + c) if dropout else 0))
    elif attention == "fused":
        attn += 4 * a * s * b
    attn += dropout_extra[1]
    # Gemma's norms keep their 1 + weight in fp32, whole on every rank (h wide, per norm).
    ones = 4 * h * (4 if post_norms else 2) if norm == "gemma_rmsnorm" else 0
    if sequence_parallel:
        return (unsplit + attn + mlp) / t + ones
    # A part whose split output the plan gathers (tp_gathered) runs whole on every rank, and the
    # row-wise linear after it splits its whole input and keeps its own 1/t share for backward:
    # in place of that input where the input was its own tensor (phi3's .contiguous() attention
    # output, the MLP product), besides it where it is a view of SDPA's output, which SDPA keeps
    # (the llama layout's). Measured on tiny olmo2 and phi3 TP-2 trials (tests/test_engines.py).
    gather_attn, gather_mlp = tp_gathered if t > 1 else (False, False)
    q_width = a * (head_dim or h // a)
    own = (q_width / t - (q_width if fused_qkv else 0) if gather_attn else 0) + (f / t - f if gather_mlp else 0)
    whole = (attn if gather_attn else 0) + (mlp if gather_mlp else 0)
    return unsplit + whole + (attn + mlp - whole) / t + s * b * c * own + ones


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


def recomputed_layer_indices(n_layers: int, checkpointing: Checkpointing, every: int) -> range:
    """The blocks that recompute their activations (the worker's rule, trials.workloads.hf
    apply_checkpointing: all, every k-th from the first, none)."""
    if checkpointing is Checkpointing.full:
        return range(n_layers)
    if checkpointing is Checkpointing.selective:
        return range(0, n_layers, max(1, every))
    return range(0)


def recomputed_layers(n_layers: int, checkpointing: Checkpointing, every: int) -> int:
    """How many blocks recompute their activations (the worker's rule: all, every k-th, none)."""
    return len(recomputed_layer_indices(n_layers, checkpointing, every))


def model_level_bytes(model: ModelShape, s: int, b: int, residual_bytes: int) -> int:
    """What a transformers llama-family model keeps outside its blocks (an RMSNorm family, or
    olmo's LayerNorm, measured as `norm_bytes`): RoPE's cos and sin (s x head width, in the
    stream's dtype, fp32 in olmo and olmo2 (`rope_fp32`), one pair shared by every layer), the
    int64 token ids (the embedding's) and targets (the loss's), the loss's fp32 token count;
    gemma: the final norm's fp32 1 + weight and the embedding scale (in the weights' dtype).
    Whole on every TP rank. gpt2 / gpt_neo / gpt_neox / opt (`ModelShape.plain`): the ids, targets,
    count, gpt_neox's partial-rotary cos and sin (`rope_width` wide), a learned position embedding's
    int64 ids (gpt2, gpt_neo: one row for the batch; opt: one per sequence)."""
    if model.norm == "layernorm":
        return 0
    plain = model.plain
    rope = plain.rope_width if plain else model.layout.rope_width if model.layout else model.head_width or 0
    # ids s x b; targets: the loss's padded, shifted labels flattened: a view of s + 1 at micro-batch 1, a copy above
    kept = 2 * s * rope * (4 if model.rope_fp32 else residual_bytes) + 8 * (s * b + (s + 1 if b == 1 else s * b)) + 4
    if plain and plain.positions != "none":
        kept += 8 * s * (b if plain.positions == "batch" else 1)
    if model.norm == "gemma_rmsnorm":
        kept += 4 * (model.d_model or 0) + residual_bytes
    return kept


def each_layer_bytes(model: ModelShape, cfg: ActivationConfig) -> list[float] | None:
    """Bytes each block keeps for backward (`layer_activation_bytes`), first to last: a mixture's
    sparse layers count their experts, its dense ones a gated MLP `dense_width` wide; None without a shape."""
    dims = model.dims()
    if dims is None:
        return None
    c, r = dtype_bytes(cfg.precision), stream_bytes(cfg)
    moe = model.experts
    hd = model.head_width or dims.d_model // dims.n_heads
    if model.layout is not None:  # an hf_moe family: its own attention and MLP (family_layers)
        z = family_layers.Sizes(cfg.seq_len, cfg.micro_batch_size, dims.d_model, dims.n_heads,
                                model.n_kv_heads or dims.n_heads, hd, r, c)
        return [float(family_layer_bytes(model, z, bool(moe and moe.sparse[i]), cfg.device))
                for i in range(dims.n_layers)]
    drop = dropout_layer_bytes(model.dropouts, cfg.seq_len, cfg.micro_batch_size, dims.d_model, dims.n_heads,
                               model.n_kv_heads or dims.n_heads, hd, c, cfg.device, fused_qkv=model.fused_qkv,
                               r=c if model.plain and model.plain.neo_attention else r,  # drops in v's dtype
                               eager=(cfg.attention or model.attention) == "eager")
    neo = family_layers.plain_attention_bytes(model.plain, cfg.seq_len * cfg.micro_batch_size, dims.n_heads * hd, r, c)
    extra = (drop[0] + neo[0], drop[1] + neo[1])

    def layer(experts: Experts | None) -> float:
        return layer_activation_bytes(
            cfg.seq_len, cfg.micro_batch_size, dims.d_model, dims.n_heads, cfg.tp_degree,
            ffn=moe.dense_width if moe else model.ffn_hidden, n_kv_heads=model.n_kv_heads,
            head_dim=model.head_width, qk_norm=model.qk_norm, gated_mlp=model.gated_mlp,
            norm=model.norm, norm_readers=model.norm_readers, pre_norms=model.pre_norms,
            post_norms=model.post_norms, clip_qkv=model.clip_qkv,
            residual_bytes=r, compute_bytes=c, attention=cfg.attention or model.attention,
            dropout=cfg.dropout, sequence_parallel=cfg.sequence_parallel, fused_qkv=model.fused_qkv,
            experts=experts, eager_kernel="transformers" if model.attention == "eager" else "korthikanti",
            softcap=model.attn_softcap, tp_gathered=model.tp_gathered,
            mlp_kept=model.plain.mlp_kept if model.plain else 2,
            parallel_residual=bool(model.plain and model.plain.parallel_residual), dropout_extra=extra)

    if moe is None:
        return [layer(None)] * dims.n_layers
    sparse, dense = layer(moe), layer(None)
    return [sparse if moe.sparse[i] else dense for i in range(dims.n_layers)]


def family_layer_bytes(model: ModelShape, z: family_layers.Sizes, sparse: bool, device: Device) -> int:
    """Bytes one layer of an autotune.estimate.hf_moe family (`model.layout`) keeps: its two
    norms (`norm_bytes`, read by the matmuls family_layers.norm_readers names) and its attention
    and MLP (family_layers.block_bytes), with the attention the worker runs (gpt_oss: eager,
    whatever the config's `attention` says; deepseek: SDPA's kernel on `device`). TP 1 only
    (hf_defaults.NO_TP)."""
    assert model.layout is not None
    norms = [norm_bytes(model.norm, z.r, z.c, k) for k in family_layers.norm_readers(model.layout, sparse)]
    return (sum(z.s * z.b * (z.h * e + n) for e, n in norms)
            + family_layers.block_bytes(model.layout, z, model.experts if sparse else None, device))


def activation_parts(model: ModelShape, cfg: ActivationConfig) -> dict[str, int] | None:
    """Activation bytes per rank: `kept` for backward by the blocks and the final norm
    (what a saved-tensor meter sees), `recompute_transient` (one recomputed block's full set
    during backward), `kept_logits` (the fp32 log-softmax output; gemma2's soft-capped logits
    too) and `logits` (the loss's buffers at their peak).

    The built-in GPT and Hugging Face models train with torch SDPA (`attention="fused"`; gemma2
    with transformers' eager attention, `ModelShape.attention`), so Korthikanti's 5as/h term is
    not kept, and with their config's dropout (the built-in GPT none; gpt2 and opt on by default:
    what it keeps, autotune.estimate.dropout): with fused
    attention, the paper's selective recompute (recompute the attention core) saves nothing
    more, which is why autotune's `selective` means "recompute every k-th block whole".
    A recomputed block keeps only its input, and during backward one block at a time holds
    its full set again (the largest of those recomputed). Under torch autocast the residual
    stream stays fp32.
    """
    dims, layers = model.dims(), each_layer_bytes(model, cfg)
    if dims is None or layers is None:
        return None
    s, b, h, t = cfg.seq_len, cfg.micro_batch_size, dims.d_model, cfg.tp_degree
    c, r = dtype_bytes(cfg.precision), stream_bytes(cfg)
    rec = set(recomputed_layer_indices(dims.n_layers, cfg.checkpointing, cfg.checkpoint_every))
    kept_input = s * b * h * r / (t if cfg.sequence_parallel else 1)
    kept = sum(kept_input if i in rec else x for i, x in enumerate(layers))
    per_element, per_token = norm_bytes(model.norm, r, c)  # the final norm: the LM head reads it
    kept += s * b * (h * per_element + per_token) + model_level_bytes(model, s, b, r)
    kept += dropout_model_bytes(model.dropouts, s * b, h, r, cfg.device)
    # Logits: the fp32 log-softmax output is kept for backward, and the backward of the loss
    # holds its gradient and the logits' gradient at once: 3 fp32 copies. Whole on every TP
    # rank: the LM head is not split (trials/engines/tp.py splits the blocks only).
    logits = 12 * s * b * dims.vocab_size
    # gemma2's final soft-capping keeps its tanh's output, the logits in the compute dtype
    # (measured: fp32 4, bf16 autocast and bf16 weights 2 bytes a logit), from the forward on.
    capped = c * s * b * dims.vocab_size if model.logit_softcap else 0
    transient = max((layers[i] for i in rec), default=0)
    return {"kept": int(kept), "recompute_transient": int(transient),
            "kept_logits": int(logits / 3 + capped), "logits": int(logits + capped)}


def activation_bytes(model: ModelShape, cfg: ActivationConfig) -> tuple[int | None, int | None]:
    """(activations at the backward peak, logits and loss buffers), bytes per rank; None
    without the model's shapes. See `activation_parts`."""
    parts = activation_parts(model, cfg)
    if parts is None:
        return None, None
    return parts["kept"] + parts["recompute_transient"], parts["logits"]
