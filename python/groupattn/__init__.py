"""groupattn: attention kernels for LLM inference (GQA prefill and decode, Kimi Delta Attention).

Functions take any DLPack tensor (numpy arrays run the fp64 CPU reference engine; torch, CuPy
tensors on a GPU run the CUDA engines) and return outputs of the caller's framework. Tensors are
passed through as strided views, never copied or made contiguous. Library errors arrive as
ValueError (invalid argument), NotImplementedError (no engine serves the problem), MemoryError or
RuntimeError (CUDA), carrying the library's message.

With torch importable, the ops are also registered as torch custom ops (torch.ops.groupattn.*)
with fake implementations, so torch.compile and CUDA-graph capture work.
"""

import importlib.util as _importlib_util

from . import _ext
from ._ops import (
    attention,
    attention_engine_for,
    attention_merge,
    attention_with_kvcache,
    attention_workspace_bytes,
    chunk_kda,
    fused_recurrent_kda,
    kda_engine_for,
)

__version__ = _ext.build_info()["version"]


def engines():
    """Engines of each op in this build, in selection order:
    {"attention": [{"name", "description", "supports", "available", "unavailable_reason"}, ...],
     "kda": [...]}. Pass a name as engine= to pin it."""
    return _ext.engines()


def build_info():
    """{"version", "cuda_compiled", "cuda_archs"} of the compiled library."""
    return _ext.build_info()


def cuda_device_available():
    return _ext.cuda_device_available()


if _importlib_util.find_spec("torch") is not None:
    from . import _ops as _ops_module
    from . import _torch_ops  # noqa: F401  (registers torch.ops.groupattn.*)

    _ops_module.enable_torch_fast(_torch_ops.torch)  # eager torch calls: one crossing (docs/HOST_COST.md)

__all__ = [
    "attention",
    "attention_with_kvcache",
    "attention_merge",
    "attention_workspace_bytes",
    "attention_engine_for",
    "kda_engine_for",
    "chunk_kda",
    "fused_recurrent_kda",
    "engines",
    "build_info",
    "cuda_device_available",
]
