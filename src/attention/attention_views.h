// Every tensor view of an attention problem, with the name messages use, in one list. Validation
// (layouts, devices, overlap), the reference's host check and the GPU engines' device check all
// walk it, so a tensor added to AttentionParams is covered everywhere at once. C++17 (the CUDA
// engines include it).
#pragma once

#include <array>

#include "groupattn/attention.h"

namespace groupattn {

struct NamedView {
  const TensorView* view;
  const char* name;
  bool output;  // written by the call (out, lse); every other view is read only
};

inline std::array<NamedView, 13> attention_views(const AttentionParams& p) {
  return {{{&p.q, "q", false},
           {&p.k, "k", false},
           {&p.v, "v", false},
           {&p.out, "out", true},
           {&p.lse, "lse", true},
           {&p.cu_seqlens_q, "cu_seqlens_q", false},
           {&p.cu_seqlens_k, "cu_seqlens_k", false},
           {&p.seqlens_k, "seqlens_k", false},
           {&p.block_table, "block_table", false},
           {&p.kv_shard_offset, "kv_shard_offset", false},
           {&p.kv_total_len, "kv_total_len", false},
           {&p.k_scale, "k_scale", false},
           {&p.v_scale, "v_scale", false}}};
}

// Every (defined) view in device memory, as the GPU engines require.
inline bool all_views_on_device(const AttentionParams& p) {
  for (const NamedView& v : attention_views(p)) {
    if (v.view->defined() && v.view->device != Device::kCUDA) return false;
  }
  return true;
}

}  // namespace groupattn
