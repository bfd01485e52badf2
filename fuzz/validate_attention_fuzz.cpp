// libFuzzer target: attention validation and the fp64 reference engine on fuzzed problems.
//
// The input decodes into a mostly consistent AttentionParams (batched / varlen Q, batched / varlen /
// paged K/V) whose shapes, strides, dtypes, ranks, devices, index contents and options are then
// perturbed, every tensor backed by a buffer of exactly the bytes its view addresses. Oracles:
//   - accepted and small enough to run: the reference runs, and ASan/UBSan see no access outside
//     the buffers (and no undefined behaviour); inputs are left unchanged;
//   - rejected: out and lse still hold their poison bytes, inputs unchanged;
//   - out placed on top of q, and outputs whose elements overlap each other, are never accepted.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fuzz_tensors.h"
#include "groupattn/attention.h"
#include "groupattn/supported.h"

using namespace groupattn;
using namespace groupattn::fuzz;

namespace {

float pick_float(FuzzedDataProvider& in, float typical) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 3: return NAN;
    case 4: return INFINITY;
    case 5: return -INFINITY;
    case 6: return -1.f;
    case 7: return in.ConsumeFloatingPoint<float>();
    default: return typical;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);

  // The consistent problem the perturbations start from.
  const DType dtype = kAttentionDTypes[in.ConsumeIntegralInRange<size_t>(0, kAttentionDTypes.size() - 1)];
  const int64_t B = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t Sq = in.ConsumeIntegralInRange<int64_t>(0, 4);
  const int64_t Sk = in.ConsumeIntegralInRange<int64_t>(0, 5);
  const int64_t Hkv = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t Hq = Hkv * in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t D = in.ConsumeBool() ? 32 : kAttentionHeadDims[in.ConsumeIntegralInRange<size_t>(0, 5)];
  const int64_t Dv = in.ConsumeBool() ? D : 32;
  const bool varlen_q = in.ConsumeBool();
  const int kv_mode = in.ConsumeIntegralInRange<int>(0, 2);  // batched, varlen, paged
  const int64_t total_q = varlen_q ? in.ConsumeIntegralInRange<int64_t>(0, 8) : B * Sq;
  const int64_t total_k = in.ConsumeIntegralInRange<int64_t>(0, 10);
  const int64_t num_pages = in.ConsumeIntegralInRange<int64_t>(0, 6);
  const int64_t page_size = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t max_pages = in.ConsumeIntegralInRange<int64_t>(0, 4);
  // An fp8 KV cache (k/v f8e4m3 with fp32 scales per sequence or per page) for 16-bit q.
  const bool fp8 = dtype != DType::kF32 && in.ConsumeBool();
  const DType kv_dtype = fp8 ? kAttentionFp8KvDType : dtype;
  const bool per_page = fp8 && kv_mode == 2 && in.ConsumeBool();

  AttentionParams p;
  const auto toggled = [&](bool present) { return rare(in, 32) ? !present : present; };
  // Views (data pointers are set below, once every shape is known).
  if (varlen_q) {
    p.q = decode_view(in, dtype, {total_q, Hq, D});
    p.out = decode_view(in, dtype, {total_q, Hq, Dv});
  } else {
    p.q = decode_view(in, dtype, {B, Sq, Hq, D});
    p.out = decode_view(in, dtype, {B, Sq, Hq, Dv});
  }
  if (kv_mode == 0) {
    p.k = decode_view(in, kv_dtype, {B, Sk, Hkv, D});
    p.v = decode_view(in, kv_dtype, {B, Sk, Hkv, Dv});
  } else if (kv_mode == 1) {
    p.k = decode_view(in, kv_dtype, {total_k, Hkv, D});
    p.v = decode_view(in, kv_dtype, {total_k, Hkv, Dv});
  } else {
    p.k = decode_view(in, kv_dtype, {num_pages, page_size, Hkv, D});
    p.v = decode_view(in, kv_dtype, {num_pages, page_size, Hkv, Dv});
  }
  p.k_scale = decode_view(in, DType::kF32, {per_page ? num_pages : B, Hkv});
  p.v_scale = decode_view(in, DType::kF32, {per_page ? num_pages : B, Hkv});
  p.kv_scale_per_page = rare(in, 32) ? !per_page : per_page;
  p.lse = decode_view(in, DType::kF32, {Hq, total_q});
  p.cu_seqlens_q = decode_view(in, DType::kI32, {B + 1});
  p.cu_seqlens_k = decode_view(in, DType::kI32, {B + 1});
  p.seqlens_k = decode_view(in, DType::kI32, {B});
  p.block_table = decode_view(in, DType::kI32, {B, max_pages});
  const bool has_out = toggled(true), has_lse = in.ConsumeBool();
  const bool has_cu_q = toggled(varlen_q), has_cu_k = toggled(kv_mode == 1);
  const bool has_seqlens = toggled(kv_mode == 2 || (kv_mode == 0 && in.ConsumeBool()));
  const bool has_table = toggled(kv_mode == 2);
  const bool has_q = toggled(true), has_k = toggled(true), has_v = toggled(true);
  const bool has_k_scale = toggled(fp8), has_v_scale = toggled(fp8);

  p.max_seqlen_q = in.ConsumeBool() ? 0 : pick_extent(in, in.ConsumeIntegralInRange<int64_t>(0, 8));
  p.max_seqlen_k = in.ConsumeBool() ? 0 : pick_extent(in, in.ConsumeIntegralInRange<int64_t>(0, 8));
  p.softmax_scale = pick_float(in, NAN);
  p.causal = in.ConsumeBool();
  p.window_left = in.ConsumeBool() ? -1 : pick_extent(in, in.ConsumeIntegralInRange<int64_t>(-2, 4));
  p.window_right = in.ConsumeBool() ? -1 : pick_extent(in, in.ConsumeIntegralInRange<int64_t>(-2, 4));
  p.softcap = in.ConsumeBool() ? 0.f : pick_float(in, 30.f);
  p.num_splits = in.ConsumeIntegralInRange<int>(-1, 4);
  RunOptions options;
  options.engine = "reference";
  options.check_device_indices = in.ConsumeBool();
  const bool out_on_q = rare(in, 32);

  // Back every present view with its own exact-span buffer.
  Buffer bq, bk, bv, bout, blse, bcuq, bcuk, bseq, btab, bks, bvs;
  const struct {
    TensorView* t;
    Buffer* b;
    bool present;
    Fill fill;
  } views[] = {{&p.q, &bq, has_q, Fill::kZero},          {&p.k, &bk, has_k, Fill::kZero},
               {&p.v, &bv, has_v, Fill::kZero},          {&p.out, &bout, has_out, Fill::kPoison},
               {&p.lse, &blse, has_lse, Fill::kPoison},  {&p.cu_seqlens_q, &bcuq, has_cu_q, Fill::kIndex},
               {&p.cu_seqlens_k, &bcuk, has_cu_k, Fill::kIndex}, {&p.seqlens_k, &bseq, has_seqlens, Fill::kIndex},
               {&p.block_table, &btab, has_table, Fill::kIndex}, {&p.k_scale, &bks, has_k_scale, Fill::kZero},
               {&p.v_scale, &bvs, has_v_scale, Fill::kZero}};
  bool runnable = true;
  int64_t elements = 0;
  for (const auto& v : views) {
    if (!v.present) {
      *v.t = TensorView{};
      continue;
    }
    back_view(in, v.t, v.b, v.fill);
    runnable = runnable && !v.b->fake;
    const int64_t n = exact_numel(*v.t);
    elements = n > kMaxRunElements ? kMaxRunElements + 1 : elements + n;
  }
  runnable = runnable && elements <= kMaxRunElements;
  bool aliased = false;
  if (out_on_q && p.out.defined() && p.q.defined() && !bq.fake && !bout.fake && bout.size <= bq.size &&
      bout.size > 0 && bq.shift == bout.shift) {
    p.out.data = p.q.data;  // out written over q: must be rejected
    aliased = true;
  }

  const char* const names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table"};
  for (size_t j = 0; j < 9; ++j) dump_view(names[j], *views[j].t);
  std::vector<std::vector<uint8_t>> before;
  for (const auto& v : views) before.push_back(snapshot(*v.b));

  const Status s = runnable ? attention(p, options) : validate_attention(p);
  if (aliased && s.ok()) fail("out overlapping q was accepted");
  if (s.ok() && runnable && (!elements_distinct(p.out) || !elements_distinct(p.lse))) {
    fail("an output whose elements overlap each other was accepted");
  }
  size_t i = 0;
  for (const auto& v : views) {
    const bool is_output = v.b == &bout || v.b == &blse;
    const bool may_change = is_output && s.ok() && runnable && !aliased;
    if (!may_change && v.present && !bytes_equal(*v.b, before[i])) {
      fail(is_output ? "a rejected (or validate-only) call wrote an output" : "a call wrote an input");
    }
    ++i;
  }
  return 0;
}
