// libFuzzer target: KDA validation and the fp64 reference engines (recurrent, chunked) on fuzzed
// problems. Same scheme and oracles as validate_attention_fuzz.cpp: a consistent KdaParams is
// perturbed (shapes, strides, dtypes, ranks, devices, cu_seqlens and state_indices contents, gate
// options, state pools updated in place), every tensor backed by exactly its span;
//   - accepted and small: the engine runs with no access outside the buffers (ASan) and no UB;
//   - outputs whose elements overlap each other are never accepted;
//   - rejected: out and final_state keep their poison bytes; inputs never change (except the
//     state pool updated in place, which is both).
#include <cmath>
#include <cstdint>
#include <vector>

#include "fuzz_tensors.h"
#include "groupattn/kda.h"
#include "groupattn/supported.h"

using namespace groupattn;
using namespace groupattn::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);

  const DType dtype = kKdaDTypes[in.ConsumeIntegralInRange<size_t>(0, kKdaDTypes.size() - 1)];
  const bool varlen = in.ConsumeBool();
  const int64_t B = varlen ? 1 : in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t T = in.ConsumeIntegralInRange<int64_t>(0, 6);
  const int64_t N = varlen ? in.ConsumeIntegralInRange<int64_t>(0, 3) : B;
  const int64_t H = in.ConsumeIntegralInRange<int64_t>(1, 2);
  const int64_t HV = H * in.ConsumeIntegralInRange<int64_t>(1, 2);
  const int64_t K = in.ConsumeBool() ? 32 : kKdaHeadDims[in.ConsumeIntegralInRange<size_t>(0, 3)];
  const int64_t V = in.ConsumeBool() ? 32 : kKdaHeadDims[in.ConsumeIntegralInRange<size_t>(0, 3)];
  const bool pool = in.ConsumeBool();
  const int64_t P = pool ? in.ConsumeIntegralInRange<int64_t>(0, 4) : N;

  KdaParams p;
  p.state_layout = rare(in, 16) ? static_cast<KdaStateLayout>(2)
                   : in.ConsumeBool()                          ? KdaStateLayout::kKFirst
                                                               : KdaStateLayout::kVFirst;
  const bool v_first = p.state_layout != KdaStateLayout::kKFirst;
  p.q = decode_view(in, dtype, {B, T, H, K});
  p.k = decode_view(in, dtype, {B, T, H, K});
  p.v = decode_view(in, dtype, {B, T, HV, V});
  p.g = decode_view(in, DType::kF32, {B, T, HV, K});
  p.beta = decode_view(in, DType::kF32, {B, T, HV});
  p.out = decode_view(in, dtype, {B, T, HV, V});
  p.initial_state = decode_view(in, DType::kF32, {P, HV, v_first ? V : K, v_first ? K : V});
  p.final_state = decode_view(in, DType::kF32, {P, HV, v_first ? V : K, v_first ? K : V});
  p.cu_seqlens = decode_view(in, in.ConsumeBool() ? DType::kI64 : DType::kI32, {N + 1});
  p.state_indices = decode_view(in, DType::kI32, {N});
  p.A_log = decode_view(in, DType::kF32, {HV});
  p.dt_bias = decode_view(in, DType::kF32, {HV, K});
  const int gate = rare(in, 16) ? 3 : in.ConsumeIntegralInRange<int>(0, 2);
  p.gate = static_cast<KdaGate>(gate);
  p.lower_bound = in.ConsumeBool() ? -5.f : in.ConsumeFloatingPoint<float>();
  p.use_qk_l2norm = in.ConsumeBool();
  p.use_beta_sigmoid = in.ConsumeBool();
  p.allow_neg_eigval = in.ConsumeBool();
  p.scale = in.ConsumeBool() ? NAN : in.ConsumeFloatingPoint<float>();

  const auto toggled = [&](bool present) { return rare(in, 32) ? !present : present; };
  const bool has_init = in.ConsumeBool(), has_final = in.ConsumeBool();
  const bool in_place = has_init && has_final && in.ConsumeBool();
  const bool has[] = {toggled(true), toggled(true), toggled(true), toggled(true), toggled(true), toggled(true),
                      has_init, has_final && !in_place, toggled(varlen), toggled(pool),
                      toggled(gate == 1 || (gate == 2 && in.ConsumeBool())), gate != 0 && in.ConsumeBool()};
  RunOptions options;
  options.engine = in.ConsumeBool() ? "reference" : "reference-chunked";
  options.check_device_indices = in.ConsumeBool();

  Buffer bufs[12];
  TensorView* views[12] = {&p.q, &p.k, &p.v, &p.g, &p.beta, &p.out, &p.initial_state, &p.final_state,
                           &p.cu_seqlens, &p.state_indices, &p.A_log, &p.dt_bias};
  const Fill fills[12] = {Fill::kZero, Fill::kZero, Fill::kZero, Fill::kZero, Fill::kZero, Fill::kPoison,
                          Fill::kZero, Fill::kPoison, Fill::kIndex, Fill::kIndex, Fill::kZero, Fill::kZero};
  bool runnable = true;
  int64_t elements = 0;
  for (int i = 0; i < 12; ++i) {
    if (!has[i]) {
      *views[i] = TensorView{};
      continue;
    }
    back_view(in, views[i], &bufs[i], fills[i]);
    runnable = runnable && !bufs[i].fake;
    const int64_t n = exact_numel(*views[i]);
    elements = n > kMaxRunElements ? kMaxRunElements + 1 : elements + n;
  }
  if (in_place) p.final_state = p.initial_state;  // the pool updated in place
  runnable = runnable && elements <= kMaxRunElements;

  std::vector<std::vector<uint8_t>> before;
  for (const Buffer& b : bufs) before.push_back(snapshot(b));
  const Status s = runnable ? kda(p, options) : validate_kda(p);
  if (s.ok() && runnable && (!elements_distinct(p.out) || !elements_distinct(p.final_state))) {
    fail("an output whose elements overlap each other was accepted");
  }
  for (int i = 0; i < 12; ++i) {
    const bool is_output = i == 5 || i == 7 || (i == 6 && in_place);
    const bool may_change = is_output && s.ok() && runnable;
    if (!may_change && has[i] && !bytes_equal(bufs[i], before[static_cast<size_t>(i)])) {
      fail(is_output ? "a rejected (or validate-only) call wrote an output" : "a call wrote an input");
    }
  }
  return 0;
}
