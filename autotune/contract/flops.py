"""FLOPs per trained token and utilisation: one rule for the worker's measured MFU
(`trials/measure.py`) and the controller's estimates (`autotune.estimate.compute`).

    model_flops_per_token(matmul_params=85e6, n_layers=12, attn_width=768, seq_len=1024)
    hardware_flops_per_token(..., recompute_fraction=1.0)      # full recompute: 8N + 16Lds
    utilization(tokens_per_s, flops_per_token, num_devices=8, device_peak_flops=989e12)

N is the parameters that take part in a matmul for every token (`matmul_params`), not all
parameters: a lookup table (learned positions, an untied input embedding) costs no
multiply-adds, and a tied embedding counts once, as the LM head. Counting lookups would
inflate MFU most for small models with large vocabularies or contexts, the models trials run.
"""

from __future__ import annotations


def attention_width(d_model: int | None, n_heads: int | None, head_dim: int | None) -> int | None:
    """The width of the attention score and weighted-sum matmuls: heads x head width (PaLM's
    H * Q). It is the hidden size d unless a config sets its own head width (Qwen3-0.6B: 16
    heads of 128 over a 1024 hidden, 2048 wide; gemma-7b: 16 x 256 over 3072). The one rule
    for the estimate (ModelShape.attention_width) and the worker (trials/workloads/hf.py
    `shape_of`)."""
    if n_heads and head_dim:
        return n_heads * head_dim
    return d_model


def mla_head_width(qk_nope: int, qk_rope: int, v_head: int) -> int:
    """The head width Q of multi-head latent attention (DeepSeek-V2 / V3) in PaLM's 12 L H Q s:
    its scores' matmul runs qk_nope + qk_rope wide, its weighted sum v_head wide, so Q is their
    mean (192 and 128: 160; transformers' config says head_dim = qk_rope, 64, the RoPE's)."""
    return (qk_nope + qk_rope + v_head) // 2


def attention_flops_per_token(n_layers: int | None, attn_width: int | None, seq_len: int) -> float:
    """12 * L * (H * Q) * s: attention scores and weighted sum, forward + backward, at full
    (non-causal) cost, as in PaLM (Chowdhery et al. 2022, Appendix B: 12 L H Q T, H heads of
    width Q); H * Q is `attention_width`, d where the heads split the hidden size. 0 when the
    shape is unknown (the caller says so)."""
    if not n_layers or not attn_width:
        return 0.0
    return 12.0 * n_layers * attn_width * seq_len


def model_flops_per_token(matmul_params: float, n_layers: int | None, attn_width: int | None,
                          seq_len: int) -> float:
    """Model FLOPs per trained token (the MFU numerator): 6N + 12 * L * d * s, d the
    attention width (`attention_width`).

    6N: 2N forward + 4N backward (Kaplan et al. 2020, "Scaling Laws for Neural Language
    Models", sec. 2.1), N = `matmul_params`."""
    return 6.0 * matmul_params + attention_flops_per_token(n_layers, attn_width, seq_len)


def hardware_flops_per_token(matmul_params: float, n_layers: int | None, attn_width: int | None,
                             seq_len: int, recompute_fraction: float) -> float:
    """FLOPs the hardware executes per token (the HFU numerator), recomputation included:
    a fraction f of the blocks recomputed adds f of one forward, (6 + 2f)N + (12 + 4f)Lds;
    full recompute (f = 1) is 8N + 16Lds (PaLM Appendix B)."""
    forward = 2.0 * matmul_params + attention_flops_per_token(n_layers, attn_width, seq_len) / 3.0
    return (model_flops_per_token(matmul_params, n_layers, attn_width, seq_len)
            + max(0.0, recompute_fraction) * forward)


def utilization(tokens_per_s: float, flops_per_token: float | None, num_devices: int,
                device_peak_flops: float | None) -> float | None:
    """Achieved FLOP/s / (devices x dense peak FLOP/s): MFU with model FLOPs, HFU with
    hardware FLOPs. None when the peak is unknown (e.g. a CPU core): a guessed peak would
    mislead."""
    if not flops_per_token or not device_peak_flops or num_devices <= 0 or tokens_per_s <= 0:
        return None
    return tokens_per_s * flops_per_token / (num_devices * device_peak_flops)
