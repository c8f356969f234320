"""Arrays across the boundary: no copies in (DLPack), outputs in the caller's framework."""

from __future__ import annotations

from typing import Any


def framework_of(values: Any) -> str:
    """The framework of the first array among `values`: "torch", "jax" or "numpy" (the default)."""
    for v in values:
        module = type(v).__module__
        if module.startswith("torch"):
            return "torch"
        if module.startswith("jax") or module.startswith("jaxlib"):
            return "jax"
        if hasattr(v, "__dlpack__"):
            return "numpy"
    return "numpy"


def to_framework(nd: Any, framework: str) -> Any:
    """The Parhelion output `nd` (it speaks DLPack) as the framework's array, sharing memory."""
    if framework == "torch":
        import torch

        return torch.from_dlpack(nd)
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.from_dlpack(nd)
    import numpy as np

    return np.from_dlpack(nd)


def is_array(v: Any) -> bool:
    return hasattr(v, "__dlpack__")
