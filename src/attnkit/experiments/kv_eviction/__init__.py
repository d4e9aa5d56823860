"""KV-cache compression: attention sinks (StreamingLLM), H2O, SnapKV and KIVI quantization, measured."""

from .experiment import KVEviction

__all__ = ["KVEviction"]
