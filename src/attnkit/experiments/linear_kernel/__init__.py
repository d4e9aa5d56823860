"""The kernel trick behind linear attention: regrouping φ(Q)(φ(K)ᵀV), its cost and its error."""

from .experiment import LinearKernel

__all__ = ["LinearKernel"]
