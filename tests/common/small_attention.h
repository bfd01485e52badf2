// A tiny filled host attention problem (f32, 1 x 2 query tokens x 4 heads, 5 keys x 2 KV heads,
// D 32) for CPU tests of the call path around the engines: the reference engine serves it at once.
#pragma once

#include "common/host_tensor.h"
#include "groupattn/attention.h"

namespace groupattn::test {

struct SmallHostAttention {
  HostTensor q{DType::kF32, {1, 2, 4, 32}}, k{DType::kF32, {1, 5, 2, 32}}, v{DType::kF32, {1, 5, 2, 32}};
  HostTensor out{DType::kF32, {1, 2, 4, 32}};
  AttentionParams p;
  SmallHostAttention() {
    q.fill(0.5);
    k.fill(0.25);
    v.fill(1.0);
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
  }
  SmallHostAttention(const SmallHostAttention&) = delete;  // p points into the tensors
  SmallHostAttention& operator=(const SmallHostAttention&) = delete;
};

}  // namespace groupattn::test
