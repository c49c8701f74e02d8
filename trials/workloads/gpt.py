"""The built-in GPT: a plain torch.nn pre-LN decoder, sized by `autotune.contract.GPTShape`.

    model = GPT(GPT_PRESETS["tiny"])
    loss = model(input_ids, labels=labels)
    with torch.device("meta"):
        model = GPT(shape)           # shapes only; trials.workloads.materialize gives it memory

Parameter count equals `GPTShape.num_params()` exactly (a test checks it), so the
controller's analytic models and the worker agree on N.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from autotune.contract import GPTShape


class Attention(nn.Module):
    def __init__(self, s: GPTShape):
        super().__init__()
        self.n_heads = s.n_heads
        self.qkv = nn.Linear(s.d_model, 3 * s.d_model)
        self.proj = nn.Linear(s.d_model, s.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        # Local head count: under tensor parallel the qkv weight holds a slice of the heads.
        qkv = self.qkv(x)
        local_d = qkv.shape[-1] // 3
        heads = self.n_heads * local_d // d
        q, k, v = qkv.view(b, t, 3, heads, local_d // heads).unbind(dim=2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, local_d))


class MLP(nn.Module):
    def __init__(self, s: GPTShape):
        super().__init__()
        self.up = nn.Linear(s.d_model, s.ffn_mult * s.d_model)
        self.down = nn.Linear(s.ffn_mult * s.d_model, s.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, s: GPTShape):
        super().__init__()
        self.ln1 = nn.LayerNorm(s.d_model)
        self.attn = Attention(s)
        self.ln2 = nn.LayerNorm(s.d_model)
        self.mlp = MLP(s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.shape = shape
        self.tok_emb = nn.Embedding(shape.vocab_size, shape.d_model)
        self.pos_emb = nn.Embedding(shape.max_seq_len, shape.d_model)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.ln_f = nn.LayerNorm(shape.d_model)
        # Which blocks recompute their activations in backward (set by the worker).
        self.checkpointed: set[int] = set()
        # On the meta device this draws nothing: trials.workloads.materialize runs
        # `init_module` on each module once it has memory.
        self.apply(self.init_module)

    @staticmethod
    def init_module(m: nn.Module) -> None:
        """The model's own init of one module's weights (GPT-2's: N(0, 0.02), zero biases)."""
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def set_checkpointing(self, blocks: set[int]) -> None:
        self.checkpointed = set(blocks)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        t = input_ids.shape[1]
        if t > self.shape.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len {self.shape.max_seq_len}")
        pos = torch.arange(t, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)
        for i, block in enumerate(self.blocks):
            if i in self.checkpointed and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(self.ln_f(x), self.tok_emb.weight)  # tied LM head
        if labels is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


def checkpointed_blocks(n_layers: int, mode: str, every: int) -> set[int]:
    """Blocks to recompute: all (full), every k-th (selective), none."""
    if mode == "full":
        return set(range(n_layers))
    if mode == "selective":
        return set(range(0, n_layers, max(1, every)))
    return set()


def random_batches(vocab_size: int, seq_len: int, micro_batch_size: int, device: torch.device,
                   seed: int):
    """Endless random token batches (labels = inputs shifted); synthetic data, as in bench.py."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    while True:
        ids = torch.randint(0, vocab_size, (micro_batch_size, seq_len + 1), generator=g)
        ids = ids.to(device, non_blocking=True)
        yield {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
