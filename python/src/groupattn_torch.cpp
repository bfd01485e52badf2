// groupattn._torch_fast: the eager path for torch tensors (issue 11: a call's host cost). One
// Python -> C++ crossing does what the generic path (groupattn._ext over DLPack) spreads over
// several torch ops issued from Python, each costing microseconds on a GPU host:
//   - tensors are read from at::Tensor (THPVariable_Unpack): no DLPack capsules;
//   - out, lse and the workspace come from torch's caching allocator (at::empty, or its end without the
//     dispatcher where nothing could observe the difference: direct_allocation below);
//   - the stream is torch's current stream of q's device (CUDA-graph capture keeps working: the
//     allocations and the launches happen on the capturing stream, as on the generic path);
//   - validation and engine selection run once: the workspace comes through
//     RunOptions::workspace_allocator, asked only when the selected engine needs one.
// The params structs are filled through binding_common.h, as groupattn._ext fills them.
//
// Entry points take positional arguments (METH_FASTCALL) and return NotImplemented for anything
// this path does not take (a tensor subclass, a tensor that requires grad, an int where a tensor
// goes, a dtype or device the library has no name for, a rank the allocation cannot size...): the
// Python layer then runs the generic path, which raises the errors a user has always seen. Library
// errors are raised here as there (binding::set_python_error); Python renames argument names.
#include <Python.h>

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/full.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#if GROUPATTN_TORCH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>

#include "binding_common.h"
#include "groupattn/attention.h"
#include "groupattn/kda.h"

namespace ga = groupattn;

namespace {

// ---------------------------------------------------------------------------------------------
// Arguments. Each reader returns false to decline the call (the generic path takes it).

bool dtype_of(at::ScalarType s, ga::DType* d) {
  switch (s) {
    case at::kHalf: *d = ga::DType::kF16; return true;
    case at::kBFloat16: *d = ga::DType::kBF16; return true;
    case at::kFloat: *d = ga::DType::kF32; return true;
    case at::kDouble: *d = ga::DType::kF64; return true;
    case at::kInt: *d = ga::DType::kI32; return true;
    case at::kLong: *d = ga::DType::kI64; return true;
    case at::ScalarType::Float8_e4m3fn: *d = ga::DType::kF8E4M3; return true;
    default: return false;
  }
}

// A plain torch.Tensor (or Parameter) the library can read: strided, no grad, no lazy negation,
// a known dtype on the CPU or a CUDA device. Subclasses decline: their __torch_function__ may matter.
const at::Tensor* plain_tensor(PyObject* obj) {
  if (!THPVariable_CheckExact(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.requires_grad() || t.layout() != at::kStrided || t.is_neg() || t.is_conj()) return nullptr;
  if (t.dim() > ga::TensorView::kMaxRank) return nullptr;
  const c10::DeviceType dev = t.device().type();
  if (dev != c10::DeviceType::CPU && dev != c10::DeviceType::CUDA) return nullptr;
  return &t;
}

// The view of `t` as the library reads it: data pointer (storage offset included), shape and
// strides in elements, exactly as torch holds them (torch's own DLPack export passes them
// unchanged too). `writable`: the library writes through it (outputs, a state pool).
bool view_of(const at::Tensor& t, bool writable, ga::TensorView* v) {
  if (!dtype_of(t.scalar_type(), &v->dtype)) return false;
  v->data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
  const bool cuda = t.is_cuda();
  v->device = cuda ? ga::Device::kCUDA : ga::Device::kCPU;
  v->device_id = cuda ? t.device().index() : 0;
  v->rank = static_cast<int>(t.dim());
  for (int i = 0; i < v->rank; ++i) {
    v->shape[i] = t.size(i);
    v->stride[i] = t.stride(i);
  }
  ga::binding::give_empty_an_address(*v);
  return true;
}

// A required tensor argument.
bool tensor_arg(PyObject* obj, const at::Tensor** t) {
  *t = plain_tensor(obj);
  return *t != nullptr;
}

// An optional tensor argument: None -> absent (nullptr), true.
bool opt_tensor_arg(PyObject* obj, const at::Tensor** t) {
  if (obj == Py_None) {
    *t = nullptr;
    return true;
  }
  return tensor_arg(obj, t);
}

// The view of an optional tensor (absent: a view with no data, as the library reads "absent").
bool opt_view(const at::Tensor* t, bool writable, ga::TensorView* v) {
  return t == nullptr || view_of(*t, writable, v);
}

bool int_arg(PyObject* obj, int64_t* v) {
  if (!PyLong_CheckExact(obj)) return false;
  const long long x = PyLong_AsLongLong(obj);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();  // out of range: the generic path raises its own error
    return false;
  }
  *v = static_cast<int64_t>(x);
  return true;
}

// A Python float or int (the generic path calls float() on it).
bool float_arg(PyObject* obj, double* v) {
  if (PyFloat_CheckExact(obj)) {
    *v = PyFloat_AS_DOUBLE(obj);
    return true;
  }
  if (!PyLong_CheckExact(obj)) return false;
  *v = PyLong_AsDouble(obj);
  if (*v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// None -> `none_value`, else float_arg (scale: NaN = the library's default; lower_bound: -5).
bool opt_float_arg(PyObject* obj, double none_value, double* v) {
  if (obj == Py_None) {
    *v = none_value;
    return true;
  }
  return float_arg(obj, v);
}

// bool(obj), as the generic path computes it.
bool bool_arg(PyObject* obj, bool* v) {
  const int r = PyObject_IsTrue(obj);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  *v = r != 0;
  return true;
}

// window=(left, right): a tuple of two ints; anything else goes to the generic path's checks.
bool window_arg(PyObject* obj, int64_t* left, int64_t* right) {
  return PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 2 && int_arg(PyTuple_GET_ITEM(obj, 0), left) &&
         int_arg(PyTuple_GET_ITEM(obj, 1), right);
}

// engine=None or a name.
bool engine_arg(PyObject* obj, const char** name) {
  if (obj == Py_None) {
    *name = nullptr;
    return true;
  }
  if (!PyUnicode_CheckExact(obj)) return false;
  *name = PyUnicode_AsUTF8(obj);
  if (*name == nullptr) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// max_seqlen_* as groupattn._ops._max_seqlen: given -> its value; omitted with host-resident (or
// no) cu_seqlens -> 0 (the library reads them itself). Omitted with device cu_seqlens needs a
// device read (a sync): declined, the generic path does it.
bool max_seqlen_arg(PyObject* obj, const at::Tensor* cu_seqlens, int64_t* v) {
  if (obj != Py_None) return int_arg(obj, v);
  if (cu_seqlens != nullptr && cu_seqlens->is_cuda()) return false;
  *v = 0;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Allocation. at::empty goes through the dispatcher (BackendSelect, then the device's kernel), which
// ends in at::detail::empty_cuda / empty_cpu plus, under deterministic algorithms with
// fill_uninitialized_memory, a NaN fill. Calling that end directly gives the same tensor (same
// allocator block, TensorImpl, dispatch keys, inference-mode handling) without the dispatch
// (~0.1-0.3 us a tensor; docs/HOST_COST.md, Session 12) where nothing can observe the difference:
// no dispatch key pushed by a mode (a TorchDispatchMode adds Python and PythonTLSSnapshot; functorch
// its layers), no RecordFunction callbacks (the profiler's aten::empty events), no deterministic
// fill. Otherwise at::empty, as before. Checked once per call (thread-local and global flags).

// _torch_fast._set_direct_allocation(mode): -1 (default) as above, 0 always at::empty: an A/B of the
// two forms inside one process (bench/profile_host.py).
std::atomic<int> g_direct_mode{-1};

bool direct_allocation() {
  if (g_direct_mode.load(std::memory_order_relaxed) == 0) return false;
  const c10::DispatchKeySet pushed = c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set;
  if (!pushed.empty() || at::hasCallbacks()) return false;
  const at::Context& ctx = at::globalContext();
  return !(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory());
}

at::Tensor empty(at::IntArrayRef shape, const at::TensorOptions& o, bool direct) {
  if (direct) {
#if GROUPATTN_TORCH_CUDA
    if (o.device().is_cuda()) return at::detail::empty_cuda(shape, o);
#endif
    if (o.device().is_cpu()) return at::detail::empty_cpu(shape, o);
  }
  return at::empty(shape, o);
}

at::Tensor empty_strided(at::IntArrayRef shape, at::IntArrayRef strides, const at::TensorOptions& o, bool direct) {
  if (direct) {
#if GROUPATTN_TORCH_CUDA
    if (o.device().is_cuda()) return at::detail::empty_strided_cuda(shape, strides, o);
#endif
    if (o.device().is_cpu()) return at::detail::empty_strided_cpu(shape, strides, o);
  }
  return at::empty_strided(shape, strides, o);
}

// ---------------------------------------------------------------------------------------------
// The call.

// The current torch stream of `t`'s device (nullptr for host tensors: host engines ignore it).
void* current_stream(const at::Tensor& t) {
#if GROUPATTN_TORCH_CUDA
  if (t.is_cuda()) return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
  (void)t;
  return nullptr;
}

// RunOptions::workspace_allocator over torch's caching allocator on `device`. Called by the library
// (GIL released) only when the selected engine needs a workspace. `buffer` owns it until the call
// returns: the caching allocator is stream-ordered on the current stream, where the op's work
// runs, so handing the block back then is safe, as for any torch op's temporary. An exception
// (torch's OutOfMemoryError) is kept and re-raised once the library has returned.
struct TorchWorkspace {
  at::TensorOptions options;
  bool direct = false;  // direct_allocation() of the call
  at::Tensor buffer;
  std::exception_ptr error;

  static ga::Status allocate(void* context, size_t bytes, void** ptr) {
    auto* w = static_cast<TorchWorkspace*>(context);
    try {
      w->buffer = empty({static_cast<int64_t>(bytes)}, w->options, w->direct);
      *ptr = w->buffer.mutable_data_ptr();
      return ga::Status::Ok();
    } catch (...) {
      w->error = std::current_exception();
      return {ga::StatusCode::kOutOfMemory, "torch's allocator raised"};
    }
  }
};

// Releases the GIL for the library call (the host reference engine may run long; a GPU call
// enqueues), re-acquiring it however the scope ends.
struct GilRelease {
  PyThreadState* state = PyEval_SaveThread();
  GilRelease() = default;
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
  ~GilRelease() { PyEval_RestoreThread(state); }
};

// Runs `op(p, options)` with the GIL released and the workspace from torch; true on success, else
// the Python error is set (a library Status) or the allocator's exception is re-thrown.
template <class Params, class Op>
bool run_op(Op op, const Params& p, const at::Tensor& q, const char* engine, bool direct) {
  TorchWorkspace ws{q.options().dtype(at::kByte), direct, {}, {}};
  ga::RunOptions o;
  o.engine = engine;
  o.stream = current_stream(q);
  o.workspace_allocator = &TorchWorkspace::allocate;
  o.workspace_allocator_context = &ws;
  ga::Status s;
  {
    GilRelease release;
    s = op(p, o);
  }
  if (ws.error) std::rethrow_exception(ws.error);
  if (s.ok()) return true;
  ga::binding::set_python_error(s);
  return false;
}

// Entry points are called by groupattn._ops only, with every argument positional.
bool arg_count_ok(const char* fn, Py_ssize_t want, Py_ssize_t got) {
  if (got == want) return true;
  PyErr_Format(PyExc_TypeError, "%s: %zd positional arguments expected, got %zd", fn, want, got);
  return false;
}

// A new reference to the Python tensor: `given` when the caller passed it, else `made` wrapped.
PyObject* wrap(PyObject* given, at::Tensor&& made) {
  if (given != nullptr) {
    Py_INCREF(given);
    return given;
  }
  return THPVariable_Wrap(std::move(made));
}

// (a, b); b = None when absent. Steals the references.
PyObject* pair(PyObject* a, PyObject* b) {
  if (a == nullptr || (b == nullptr && PyErr_Occurred())) {
    Py_XDECREF(a);
    Py_XDECREF(b);
    return nullptr;
  }
  if (b == nullptr) {
    Py_INCREF(Py_None);
    b = Py_None;
  }
  PyObject* t = PyTuple_New(2);
  if (t == nullptr) {
    Py_DECREF(a);
    Py_DECREF(b);
    return nullptr;
  }
  PyTuple_SET_ITEM(t, 0, a);
  PyTuple_SET_ITEM(t, 1, b);
  return t;
}

// attention(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, kv_shard_offset,
//           kv_total_len, max_seqlen_q, max_seqlen_k, scale, causal, window, softcap, num_splits,
//           engine, return_lse, k_scale, v_scale, kv_scale_per_page, batched_q_only)
//   -> (out, lse or None), or NotImplemented. Outputs as groupattn._ops.alloc_attention_outputs
// makes them: out like q with v's head dim; lse fp32 [B, Hq, Sq] strided as a view of the
// library's [Hq, B * Sq] for batched q, [Hq, total_q] for varlen q. seqlens_k may be an int
// (FlashAttention's cache_seqlens=int): an int32 [B] filled with it. batched_q_only: q must be
// [B, Sq, Hq, D] (attention_with_kvcache).
constexpr Py_ssize_t kAttentionArgs = 23;

PyObject* attention(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!arg_count_ok("attention", kAttentionArgs, nargs)) return nullptr;
  const at::Tensor *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *cu_q = nullptr, *cu_k = nullptr,
                   *seqlens = nullptr, *table = nullptr, *shard = nullptr, *total = nullptr, *ks = nullptr,
                   *vs = nullptr;
  int64_t max_q = 0, max_k = 0, wl = -1, wr = -1, splits = 0;
  double scale = NAN, softcap = 0.0;
  bool causal = false, return_lse = true, per_page = false, batched_only = false;
  const char* engine = nullptr;
  const bool seqlens_is_int = PyLong_CheckExact(args[6]);
  if (!tensor_arg(args[0], &q) || !tensor_arg(args[1], &k) || !tensor_arg(args[2], &v) ||
      !opt_tensor_arg(args[3], &out) || !opt_tensor_arg(args[4], &cu_q) || !opt_tensor_arg(args[5], &cu_k) ||
      (!seqlens_is_int && !opt_tensor_arg(args[6], &seqlens)) || !opt_tensor_arg(args[7], &table) ||
      !opt_tensor_arg(args[8], &shard) || !opt_tensor_arg(args[9], &total) ||
      !max_seqlen_arg(args[10], cu_q, &max_q) || !max_seqlen_arg(args[11], cu_k, &max_k) ||
      !opt_float_arg(args[12], NAN, &scale) || !bool_arg(args[13], &causal) || !window_arg(args[14], &wl, &wr) ||
      !float_arg(args[15], &softcap) || !int_arg(args[16], &splits) || !engine_arg(args[17], &engine) ||
      !bool_arg(args[18], &return_lse) || !opt_tensor_arg(args[19], &ks) || !opt_tensor_arg(args[20], &vs) ||
      !bool_arg(args[21], &per_page) || !bool_arg(args[22], &batched_only)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  const int64_t q_rank = q->dim(), v_rank = v->dim();
  if ((batched_only && q_rank != 4) || (q_rank != 3 && q_rank != 4) || (v_rank != 3 && v_rank != 4) ||
      splits < INT32_MIN || splits > INT32_MAX) {
    Py_RETURN_NOTIMPLEMENTED;  // the generic path names the argument at fault
  }
  at::Tensor seqlens_made;
  if (seqlens_is_int) {
    int64_t fill = 0;
    if (!int_arg(args[6], &fill)) Py_RETURN_NOTIMPLEMENTED;
    seqlens_made = at::full({q->size(0)}, fill, q->options().dtype(at::kInt));
    seqlens = &seqlens_made;
  }

  const bool direct = direct_allocation();
  at::Tensor out_made, lse;
  if (out == nullptr) {
    c10::SmallVector<int64_t, ga::TensorView::kMaxRank> shape(q->sizes().begin(), q->sizes().end());
    shape.back() = v->size(-1);
    out_made = empty(shape, q->options(), direct);
  }
  if (return_lse) {
    const at::TensorOptions f32 = q->options().dtype(at::kFloat);
    if (cu_q != nullptr || q_rank != 4) {
      lse = empty({q->size(-2), q->size(0)}, f32, direct);
    } else {
      const int64_t b = q->size(0), sq = q->size(1), hq = q->size(2);
      lse = empty_strided({b, hq, sq}, {sq, b * sq, 1}, f32, direct);
    }
  }

  ga::AttentionParams p;
  if (!view_of(*q, false, &p.q) || !view_of(*k, false, &p.k) || !view_of(*v, false, &p.v) ||
      !view_of(out != nullptr ? *out : out_made, true, &p.out) || !opt_view(cu_q, false, &p.cu_seqlens_q) ||
      !opt_view(cu_k, false, &p.cu_seqlens_k) || !opt_view(seqlens, false, &p.seqlens_k) ||
      !opt_view(table, false, &p.block_table) || !opt_view(shard, false, &p.kv_shard_offset) ||
      !opt_view(total, false, &p.kv_total_len) || !opt_view(ks, false, &p.k_scale) ||
      !opt_view(vs, false, &p.v_scale)) {
    Py_RETURN_NOTIMPLEMENTED;  // a dtype the library has no name for: the generic path says which
  }
  if (return_lse) {
    (void)view_of(lse, true, &p.lse);  // fp32: always known
    (void)ga::binding::merge_batched_lse(p.lse);  // strides made above: always merge
  }
  ga::binding::set_attention_scalars(p, max_q, max_k, scale, causal, wl, wr, softcap, static_cast<int>(splits),
                                     per_page);
  if (!run_op([](const ga::AttentionParams& pp, const ga::RunOptions& oo) { return ga::attention(pp, oo); }, p,
              *q, engine, direct)) {
    return nullptr;
  }
  return pair(wrap(out != nullptr ? args[3] : nullptr, std::move(out_made)),
              return_lse ? THPVariable_Wrap(std::move(lse)) : nullptr);
  END_HANDLE_TH_ERRORS
}

// kda(q, k, v, g, beta, scale, initial_state, final_state_mode, cu_seqlens, state_indices,
//     state_v_first, gate, A_log, dt_bias, lower_bound, use_qk_l2norm, use_beta_sigmoid,
//     allow_neg_eigval, engine) -> (o, final_state or None), or NotImplemented.
// final_state_mode: 0 none, 1 a new fp32 state (groupattn._ops.alloc_kda_outputs' shape), 2 the
// state pool initial_state, updated in place and returned. o: v's shape, q's dtype.
constexpr Py_ssize_t kKdaArgs = 19;

PyObject* kda(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (!arg_count_ok("kda", kKdaArgs, nargs)) return nullptr;
  const at::Tensor *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr, *init = nullptr,
                   *cu = nullptr, *idx = nullptr, *a_log = nullptr, *dt_bias = nullptr;
  int64_t final_mode = 0, gate = 0;
  double scale = NAN, lower_bound = -5.0;
  bool v_first = false, l2norm = false, beta_sigmoid = false, neg_eigval = false;
  const char* engine = nullptr;
  if (!tensor_arg(args[0], &q) || !tensor_arg(args[1], &k) || !tensor_arg(args[2], &v) ||
      !tensor_arg(args[3], &g) || !tensor_arg(args[4], &beta) || !opt_float_arg(args[5], NAN, &scale) ||
      !opt_tensor_arg(args[6], &init) || !int_arg(args[7], &final_mode) || !opt_tensor_arg(args[8], &cu) ||
      !opt_tensor_arg(args[9], &idx) || !bool_arg(args[10], &v_first) || !int_arg(args[11], &gate) ||
      !opt_tensor_arg(args[12], &a_log) || !opt_tensor_arg(args[13], &dt_bias) ||
      !opt_float_arg(args[14], -5.0, &lower_bound) || !bool_arg(args[15], &l2norm) ||
      !bool_arg(args[16], &beta_sigmoid) || !bool_arg(args[17], &neg_eigval) || !engine_arg(args[18], &engine)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  if (q->dim() != 4 || v->dim() != 4 || final_mode < 0 || final_mode > 2 || (final_mode == 2 && init == nullptr) ||
      (final_mode == 1 && cu != nullptr && cu->dim() < 1) || gate < 0 || gate > 2) {
    Py_RETURN_NOTIMPLEMENTED;  // the generic path names the argument at fault
  }
  const bool direct = direct_allocation();
  at::Tensor o = empty(v->sizes(), q->options(), direct);
  at::Tensor final_made;
  if (final_mode == 1) {
    const int64_t n = cu != nullptr ? cu->size(0) - 1 : q->size(0);
    const int64_t hv = v->size(2), kd = q->size(3), vd = v->size(3);
    const at::TensorOptions f32 = q->options().dtype(at::kFloat);
    final_made = v_first ? empty({n, hv, vd, kd}, f32, direct) : empty({n, hv, kd, vd}, f32, direct);
  }
  const at::Tensor* final_state = final_mode == 2 ? init : (final_mode == 1 ? &final_made : nullptr);

  ga::KdaParams p;
  if (!view_of(*q, false, &p.q) || !view_of(*k, false, &p.k) || !view_of(*v, false, &p.v) ||
      !view_of(*g, false, &p.g) || !view_of(*beta, false, &p.beta) || !view_of(o, true, &p.out) ||
      !opt_view(init, final_mode == 2, &p.initial_state) || !opt_view(final_state, true, &p.final_state) ||
      !opt_view(cu, false, &p.cu_seqlens) || !opt_view(idx, false, &p.state_indices) ||
      !opt_view(a_log, false, &p.A_log) || !opt_view(dt_bias, false, &p.dt_bias)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  (void)ga::binding::set_kda_scalars(p, v_first, static_cast<int>(gate), lower_bound, l2norm, beta_sigmoid,
                                     neg_eigval, scale);  // gate checked above
  if (!run_op([](const ga::KdaParams& pp, const ga::RunOptions& oo) { return ga::kda(pp, oo); }, p, *q, engine,
              direct)) {
    return nullptr;
  }
  PyObject* final_obj = nullptr;
  if (final_mode == 2) {
    final_obj = wrap(args[6], {});
  } else if (final_mode == 1) {
    final_obj = THPVariable_Wrap(std::move(final_made));
  }
  return pair(THPVariable_Wrap(std::move(o)), final_obj);
  END_HANDLE_TH_ERRORS
}

// _direct_allocation() -> bool: whether a call made now would allocate without the dispatcher (tests
// and bench/profile_host.py read it; see direct_allocation()).
PyObject* direct_allocation_py(PyObject*, PyObject*) { return PyBool_FromLong(direct_allocation() ? 1 : 0); }

// _set_direct_allocation(mode): -1 automatic (the default), 0 off; returns None.
PyObject* set_direct_allocation_py(PyObject*, PyObject* arg) {
  const long mode = PyLong_AsLong(arg);
  if (mode == -1 && PyErr_Occurred()) return nullptr;
  if (mode != -1 && mode != 0) {
    PyErr_SetString(PyExc_ValueError, "_set_direct_allocation: -1 (automatic) or 0 (off)");
    return nullptr;
  }
  g_direct_mode.store(static_cast<int>(mode), std::memory_order_relaxed);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"attention", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&attention)), METH_FASTCALL,
     "attention / attention_with_kvcache on torch tensors (internal: see groupattn._ops)"},
    {"kda", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&kda)), METH_FASTCALL,
     "chunk_kda / fused_recurrent_kda on torch tensors (internal: see groupattn._ops)"},
    {"_direct_allocation", &direct_allocation_py, METH_NOARGS,
     "whether a call now allocates its outputs without the dispatcher (internal, for tests and benchmarks)"},
    {"_set_direct_allocation", &set_direct_allocation_py, METH_O,
     "-1: allocate without the dispatcher where nothing observes it (default); 0: always at::empty (A/B)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_torch_fast",
                       "groupattn's eager path for torch tensors (internal: use the groupattn package's functions)",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__torch_fast() { return PyModule_Create(&kModule); }
