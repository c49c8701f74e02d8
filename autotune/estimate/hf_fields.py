"""What the Hugging Face parameter counts share: a config's size fields read with their checks,
and the description of a mixture of experts (autotune.estimate.hf_count, hf_moe).

    hf_size({"hidden_size": 64}, "config.json", "hidden_size", "n_embd")   # 64; None if unset
    Experts(experts=8, top_k=2, width=14336, shared_width=0, sparse=(True,) * 32,
            dense_width=14336, normalise=True, fp32_weights=True)
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from autotune.errors import UserError

# The largest size field a config may set: a tensor dimension's int32 bound, far over any real
# model's, and low enough that every count and FLOP figure made of them stays a finite float.
MAX_HF_SIZE = 2**31 - 1


class Experts(NamedTuple):
    """A mixture-of-experts MLP: `experts` experts `width` wide, `top_k` run per token, a shared
    expert of `shared_width` (0: none), in the layers `sparse` marks (the others a dense MLP
    `dense_width` wide). `normalise`: the router rescales each token's top-k weights to sum to
    1 (mixtral always, qwen*_moe where norm_topk_prob); `fp32_weights`: the routing weights
    stay fp32 (mixtral; qwen*_moe casts them back to the router logits' dtype)."""

    experts: int
    top_k: int
    width: int
    shared_width: int
    sparse: tuple[bool, ...]
    dense_width: int
    normalise: bool
    fp32_weights: bool

    @property
    def norm_readers(self) -> int:
        """Matmuls reading a sparse layer's MLP norm output (each keeps its own 16-bit copy under
        autocast): the router, and a shared expert's gate, up and sigmoid gate (qwen2_moe). The
        experts gather rows of it (keeping the row indices, not the norm output)."""
        return 1 + (3 if self.shared_width else 0)


def set_name(cfg: dict[str, Any], *names: str) -> str | None:
    """The first of `names` the config sets (to something other than null)."""
    return next((n for n in names if cfg.get(n) is not None), None)


def hf_size(cfg: dict[str, Any], where: str, *names: str, least: int = 1) -> int | None:
    """The first of `names` the config sets, as an int; None when none is. A value that is not
    a whole number from `least` to MAX_HF_SIZE (0, -100, "x", 1e300, true) is a UserError naming it."""
    name = set_name(cfg, *names)
    if name is None:
        return None
    v = cfg[name]
    whole = (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    if not whole or not least <= v <= MAX_HF_SIZE:
        raise UserError(f"{where}: field `{name}` is {json.dumps(v, default=str)}, not a whole number "
                        f"from {least} to {MAX_HF_SIZE:,}",
                        fix=f"set `{name}` to a {'positive' if least else 'non-negative'} integer in the "
                            "config (or in the spec's workload.config_overrides, where it is set there)")
    return int(v)
