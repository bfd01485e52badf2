// Shared by the two Python bindings: groupattn._ext (any DLPack tensor, nanobind) and
// groupattn._torch_fast (torch tensors read as at::Tensor). Everything that does not depend on
// where a tensor comes from lives here, so the two cannot build different params structs from the
// same call: the scalar fields of each params struct, the batched-LSE merge, the empty-tensor
// pointer rule and the Status -> Python exception mapping.
#pragma once

#include <Python.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "groupattn/attention.h"
#include "groupattn/kda.h"
#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn::binding {

// An empty tensor may carry a null data pointer; the library reads "null" as "absent", so give
// it a non-null address that is never dereferenced (no element exists).
inline void give_empty_an_address(TensorView& t) {
  if (t.data == nullptr && t.numel() == 0) t.data = reinterpret_cast<void*>(alignof(std::max_align_t));
}

// The library's LSE is [Hq, total_q]. For batched q the bindings allocate FlashAttention's
// [B, Hq, Sq] with the strides of a view of that buffer ((Sq, B * Sq, 1), one allocation, no view
// ops) and merge B and Sq back into total_q = B * Sq here. A view of another rank passes through.
// False when a rank-3 view's B and Sq do not merge (stride(B) != Sq * stride(Sq) with B, Sq > 1).
inline bool merge_batched_lse(TensorView& t) {
  if (t.rank != 3) return true;
  const int64_t b = t.shape[0], hq = t.shape[1], sq = t.shape[2];
  if (b > 1 && sq > 1 && t.stride[0] != sq * t.stride[2]) return false;
  const int64_t step = sq > 1 ? t.stride[2] : t.stride[0];
  const int64_t head_stride = t.stride[1];
  t.rank = 2;
  t.shape[0] = hq;
  t.shape[1] = b * sq;
  t.stride[0] = head_stride;
  t.stride[1] = step;
  t.shape[2] = t.stride[2] = 0;
  return true;
}

// The scalar half of AttentionParams (tensors are the binding's own business). `scale`: NaN =
// 1 / sqrt(D), as the Python API's scale=None.
inline void set_attention_scalars(AttentionParams& p, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                  double scale, bool causal, int64_t window_left, int64_t window_right,
                                  double softcap, int num_splits, bool kv_scale_per_page) {
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.softmax_scale = static_cast<float>(scale);
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = static_cast<float>(softcap);
  p.num_splits = num_splits;
  p.kv_scale_per_page = kv_scale_per_page;
}

constexpr const char* kBadGateMessage = "gate: must be 0 (log decay), 1 (softplus) or 2 (lower bound)";

// The scalar half of KdaParams. `gate` as groupattn._ops.kda_gate numbers it (KdaGate's order);
// false when it is out of range (the caller raises kBadGateMessage). `scale`: NaN = 1 / sqrt(K).
inline bool set_kda_scalars(KdaParams& p, bool state_v_first, int gate, double lower_bound,
                            bool use_qk_l2norm, bool use_beta_sigmoid, bool allow_neg_eigval,
                            double scale) {
  if (gate < 0 || gate > 2) return false;
  p.state_layout = state_v_first ? KdaStateLayout::kVFirst : KdaStateLayout::kKFirst;
  p.gate = static_cast<KdaGate>(gate);
  p.lower_bound = static_cast<float>(lower_bound);
  p.use_qk_l2norm = use_qk_l2norm;
  p.use_beta_sigmoid = use_beta_sigmoid;
  p.allow_neg_eigval = allow_neg_eigval;
  p.scale = static_cast<float>(scale);
  return true;
}

// Sets the Python exception for a non-ok Status: InvalidArgument -> ValueError, NotSupported ->
// NotImplementedError, OutOfMemory -> MemoryError (the library's message as is), CUDA and internal
// errors -> RuntimeError ("CUDA error: ..." / "internal error: ..."). The GIL must be held.
inline void set_python_error(const Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
    case StatusCode::kNotSupported: type = PyExc_NotImplementedError; break;
    case StatusCode::kOutOfMemory: type = PyExc_MemoryError; break;
    default: PyErr_SetString(type, s.to_string().c_str()); return;
  }
  PyErr_SetString(type, s.message().c_str());
}

}  // namespace groupattn::binding
