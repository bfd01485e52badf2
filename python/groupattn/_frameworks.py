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
    def empty_lse(like, b, hq, sq):
        return np.empty((hq, b, sq), np.float32).transpose(1, 0, 2)

    @staticmethod
    def arg(x):
        """(array passed to the extension, reinterpret flag): numpy cannot export bfloat16 or
        float8_e4m3fn (ml_dtypes) through DLPack or the buffer protocol, so they travel as uint16 /
        uint8 views flagged for the extension to read back. (ml_dtypes' types are kind 'V'; numpy's
        own float types never are, so the name is read only for those.)"""
        if x is not None and x.dtype.kind == "V":
            if x.dtype.name == "bfloat16":
                return x.view(np.uint16), True
            if x.dtype.name == "float8_e4m3fn":
                return x.view(np.uint8), True
        return x, False

    converts = False  # optional tensors go to the extension as they are

    @staticmethod
    def compiling():
        return False

    @staticmethod
    def workspace_alloc(x):
        return None


class _TorchFw:
    name = "torch"
    converts = True  # optional tensors go through convert() too

    def __init__(self):
        import torch

        self.torch = torch
        self._dtypes = {"float32": torch.float32, "int32": torch.int32, "uint8": torch.uint8}
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or self._raw_stream_slow
        self._is_compiling = torch.compiler.is_compiling
        self._to_dlpack = getattr(torch._C, "_to_dlpack", None)
        self._plain = (torch.Tensor, torch.nn.Parameter)
        self._fp8 = getattr(torch, "float8_e4m3fn", None)

    def empty(self, like, shape, dtype):
        dt = like.dtype if dtype == "like" else self._dtypes[dtype]
        return self.torch.empty(shape, dtype=dt, device=like.device)

    def full_int32(self, like, n, value):
        return self.torch.full((n,), value, dtype=self.torch.int32, device=like.device)

    @staticmethod
    def is_cuda(x):
        return x.is_cuda

    def stream(self, x):
        # The raw pointer of the current stream, without building a torch.cuda.Stream object.
        d = x.get_device()
        if d < 0:
            return 0
        return self._raw_stream(d)

    def _raw_stream_slow(self, d):
        return self.torch.cuda.current_stream(d).cuda_stream

    def compiling(self):
        return self._is_compiling()

    def workspace_alloc(self, x):
        """The allocator the extension calls (only when the selected engine needs a workspace):
        nbytes -> (keep-alive tensor, pointer). None for host tensors (no workspace)."""
        if not x.is_cuda:
            return None
        return lambda nbytes: self.workspace(x, nbytes)

    def workspace(self, x, nbytes):
        # Per call, from torch's caching allocator: stream-ordered reuse makes this safe on the
        # current stream and inside CUDA-graph capture (the graph's private pool).
        buf = self.torch.empty((nbytes,), dtype=self.torch.uint8, device=x.device)
        return buf, buf.data_ptr()

    def empty_lse(self, like, b, hq, sq):
        # One allocator call with the strides of empty((hq, b, sq)).permute(1, 0, 2): every torch
        # op costs microseconds of host time, and a permute and a view were two more per call.
        return self.torch.empty_strided((b, hq, sq), (sq, b * sq, 1), dtype=self.torch.float32,
                                        device=like.device)

    def arg(self, x):
        # float8_e4m3fn K/V caches travel as uint8 views, flagged (torch's DLPack export of
        # float8 is not something every version has).
        if x is not None and x.dtype == self._fp8:
            return self.convert(x.view(self.torch.uint8)), True
        return self.convert(x), False

    def convert(self, x):
        """What the extension receives for tensor `x`: a DLPack capsule made by torch's C
        exporter (Tensor.__dlpack__ is Python code costing several microseconds per tensor;
        torch._C._to_dlpack is the C call it ends in). Tensor subclasses other than Parameter keep
        the __dlpack__ path (their __torch_function__ may matter); None stays None."""
        if x is None:
            return None
        # torch refuses to export a tensor that requires grad through DLPack; say why instead.
        if x.requires_grad:
            if self.torch.is_grad_enabled():
                raise NotImplementedError(
                    "groupattn has no backward pass: an input requires grad (run under "
                    "torch.no_grad() / torch.inference_mode(), or detach it)")
            x = x.detach()
        if type(x) in self._plain and self._to_dlpack is not None:
            return self._to_dlpack(x)
        return x


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

    def empty_lse(self, like, b, hq, sq):
        with like.device:
            return self.cupy.empty((hq, b, sq), self.cupy.float32).transpose(1, 0, 2)

    @staticmethod
    def arg(x):
        return x, False

    converts = False

    @staticmethod
    def compiling():
        return False

    def workspace_alloc(self, x):
        return lambda nbytes: self.workspace(x, nbytes)


NUMPY = _NumpyFw()
_cache = {}
_by_type = {np.ndarray: NUMPY}  # exact type -> framework: one dict lookup per call after the first


def framework_of(x, name="q"):
    """The framework that owns `x` (and allocates the outputs of a call on it)."""
    fw = _by_type.get(type(x))
    if fw is not None:
        return fw
    if isinstance(x, np.ndarray):
        _by_type[type(x)] = NUMPY
        return NUMPY
    module = type(x).__module__.split(".", 1)[0]
    if module in ("torch", "cupy"):
        fw = _cache.get(module)
        if fw is None:
            fw = _cache[module] = _TorchFw() if module == "torch" else _CupyFw()
        _by_type[type(x)] = fw
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
