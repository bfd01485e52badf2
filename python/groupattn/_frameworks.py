"""Where outputs come from: each array framework allocates its own outputs (numpy inputs give numpy
outputs, torch inputs give torch outputs on the same device, CuPy gives CuPy), and says which
stream a GPU call runs on. Nothing here copies an input.

torch is imported only when a torch tensor is seen (or groupattn registers its torch ops), so
``import groupattn`` works without torch.
"""

import sys

import numpy as np


class _NumpyFw:
    name = "numpy"

    @staticmethod
    def empty(like, shape, dtype):
        if dtype == "float32":
            return np.empty(shape, np.float32)
        if dtype == "int32":
            return np.empty(shape, np.int32)
        return np.empty(shape, like.dtype if dtype == "like" else dtype)

    @staticmethod
    def full_int32(like, n, value):
        return np.full((n,), value, np.int32)

    @staticmethod
    def is_cuda(x):
        return False

    @staticmethod
    def stream(x):
        return 0

    @staticmethod
    def workspace(x, nbytes):
        return None, 0

    @staticmethod
    def transpose_lse(buf):
        return buf.transpose(1, 0, 2)

    @staticmethod
    def flat_lse(buf):
        return buf.reshape(buf.shape[0], -1)

    @staticmethod
    def arg(x):
        """(array passed to the extension, is_bf16): numpy cannot export bfloat16 (ml_dtypes)
        through DLPack or the buffer protocol, so it travels as a uint16 view flagged as bf16."""
        if x is not None and x.dtype.name == "bfloat16":
            return x.view(np.uint16), True
        return x, False


class _TorchFw:
    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self._dtypes = {"float32": torch.float32, "int32": torch.int32, "uint8": torch.uint8}

    def empty(self, like, shape, dtype):
        dt = like.dtype if dtype == "like" else self._dtypes[dtype]
        return self.torch.empty(shape, dtype=dt, device=like.device)

    def full_int32(self, like, n, value):
        return self.torch.full((n,), value, dtype=self.torch.int32, device=like.device)

    @staticmethod
    def is_cuda(x):
        return x.is_cuda

    def stream(self, x):
        if not x.is_cuda:
            return 0
        return self.torch.cuda.current_stream(x.device).cuda_stream

    def workspace(self, x, nbytes):
        # Per call, from torch's caching allocator: stream-ordered reuse makes this safe on the
        # current stream and inside CUDA-graph capture (the graph's private pool).
        buf = self.torch.empty((nbytes,), dtype=self.torch.uint8, device=x.device)
        return buf, buf.data_ptr()

    @staticmethod
    def transpose_lse(buf):
        return buf.permute(1, 0, 2)

    @staticmethod
    def flat_lse(buf):
        return buf.view(buf.shape[0], -1)

    def arg(self, x):
        # torch refuses to export a tensor that requires grad through DLPack; say why instead.
        if x is not None and x.requires_grad:
            if self.torch.is_grad_enabled():
                raise NotImplementedError(
                    "groupattn has no backward pass: an input requires grad (run under "
                    "torch.no_grad() / torch.inference_mode(), or detach it)")
            x = x.detach()
        return x, False


class _CupyFw:
    name = "cupy"

    def __init__(self):
        import cupy

        self.cupy = cupy

    def empty(self, like, shape, dtype):
        with like.device:
            return self.cupy.empty(shape, like.dtype if dtype == "like" else dtype)

    def full_int32(self, like, n, value):
        with like.device:
            return self.cupy.full((n,), value, self.cupy.int32)

    @staticmethod
    def is_cuda(x):
        return True

    def stream(self, x):
        return self.cupy.cuda.get_current_stream().ptr

    def workspace(self, x, nbytes):
        with x.device:
            buf = self.cupy.empty((nbytes,), self.cupy.uint8)
        return buf, buf.data.ptr

    @staticmethod
    def transpose_lse(buf):
        return buf.transpose(1, 0, 2)

    @staticmethod
    def flat_lse(buf):
        return buf.reshape(buf.shape[0], -1)

    @staticmethod
    def arg(x):
        return x, False


NUMPY = _NumpyFw()
_cache = {}


def framework_of(x, name="q"):
    """The framework that owns `x` (and allocates the outputs of a call on it)."""
    if isinstance(x, np.ndarray):
        return NUMPY
    module = type(x).__module__.split(".", 1)[0]
    if module in ("torch", "cupy"):
        fw = _cache.get(module)
        if fw is None:
            fw = _cache[module] = _TorchFw() if module == "torch" else _CupyFw()
        return fw
    raise TypeError(
        f"{name}: {type(x).__module__}.{type(x).__name__} is not supported for allocating outputs "
        "(accepted: numpy.ndarray, torch.Tensor, cupy.ndarray)"
    )


def torch_is_compiling(x):
    """True while torch.compile traces a call on torch tensor `x`: the call then goes through the
    registered custom op, so the graph holds one opaque node with a fake implementation."""
    if type(x).__module__.split(".", 1)[0] != "torch":
        return False
    torch = sys.modules["torch"]
    return torch.compiler.is_compiling()
