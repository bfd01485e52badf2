// groupattn._ext: the thin nanobind layer between Python and the public C++ API.
//
// Every tensor arrives as a DLPack tensor (numpy, torch, CuPy, JAX...) through nb::ndarray and is
// turned into a TensorView without copying: data pointer, shape and strides (nanobind reports
// strides in elements, as TensorView wants) go straight through, so the library's validation sees
// exactly what the caller passed. Outputs are allocated by the Python layer (it knows the caller's
// framework); this module never imports torch. A non-ok Status becomes a Python exception carrying
// the library's message: InvalidArgument -> ValueError, NotSupported -> NotImplementedError,
// OutOfMemory -> MemoryError, CUDA and internal errors -> RuntimeError.
//
// Functions take their arguments positionally (the Python layer calls them that way): keyword
// parsing would add host cost to every call.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "binding_common.h"
#include "groupattn/context_parallel.h"
#include "groupattn/groupattn.h"

namespace nb = nanobind;
namespace ga = groupattn;

namespace {

using InArray = nb::ndarray<nb::ro>;  // read-only inputs: numpy views of read-only memory work too
using OutArray = nb::ndarray<>;
using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

constexpr const char* kAcceptedDTypes =
    "float16, bfloat16, float32, float64, int32, int64, float8_e4m3fn (K/V caches)";

[[noreturn]] void raise_status(const ga::Status& s) {
  ga::binding::set_python_error(s);
  throw nb::python_error();
}

void check(const ga::Status& s) {
  if (!s.ok()) raise_status(s);
}

// DLPack dtype -> DType. `as_bf16` ("reinterpret"): the Python layer passes numpy bfloat16 arrays
// (ml_dtypes, which numpy cannot export through DLPack) as uint16 views, and float8_e4m3fn tensors
// (torch, ml_dtypes) as uint8 views, and says so with this flag.
ga::DType to_dtype(const nb::dlpack::dtype& dt, bool as_bf16, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    if (as_bf16 && code == Code::UInt && dt.bits == 16) return ga::DType::kBF16;
    if (as_bf16 && code == Code::UInt && dt.bits == 8) return ga::DType::kF8E4M3;
    if (code == Code::Float && dt.bits == 16) return ga::DType::kF16;
    if (code == Code::Bfloat && dt.bits == 16) return ga::DType::kBF16;
    if (code == Code::Float && dt.bits == 32) return ga::DType::kF32;
    if (code == Code::Float && dt.bits == 64) return ga::DType::kF64;
    if (code == Code::Int && dt.bits == 32) return ga::DType::kI32;
    if (code == Code::Int && dt.bits == 64) return ga::DType::kI64;
  }
  static const char* kCodeNames[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const char* code_name = dt.code < 7 ? kCodeNames[dt.code] : "unknown";
  throw nb::value_error((std::string(name) + ": dtype " + code_name + std::to_string(dt.bits) +
                         (dt.lanes != 1 ? "x" + std::to_string(dt.lanes) : std::string()) +
                         " not supported (accepted: " + kAcceptedDTypes + ")")
                            .c_str());
}

ga::Device to_device(int32_t device_type, const char* name) {
  switch (device_type) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: return ga::Device::kCPU;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: return ga::Device::kCUDA;
    default:
      throw nb::value_error((std::string(name) + ": DLPack device type " + std::to_string(device_type) +
                             " not supported (accepted: CPU, CUDA, CUDA host, CUDA managed)")
                                .c_str());
  }
}

template <class Array>
ga::TensorView to_view(const Array& a, bool as_bf16, const char* name) {
  ga::TensorView t;
  const size_t rank = a.ndim();
  if (rank > static_cast<size_t>(ga::TensorView::kMaxRank)) {
    throw nb::value_error((std::string(name) + ": rank " + std::to_string(rank) +
                           " exceeds the maximum " + std::to_string(ga::TensorView::kMaxRank))
                              .c_str());
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(a.dtype(), as_bf16, name);
  t.device = to_device(a.device_type(), name);
  t.device_id = a.device_id();
  t.rank = static_cast<int>(rank);
  for (size_t i = 0; i < rank; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.stride[i] = a.stride(i);
  }
  ga::binding::give_empty_an_address(t);
  return t;
}

template <class Array>
ga::TensorView to_view(const std::optional<Array>& a, bool as_bf16, const char* name) {
  return a ? to_view(*a, as_bf16, name) : ga::TensorView{};
}

// The library's LSE is [Hq, total_q]: the Python layer passes batched q's [B, Hq, Sq] lse as is
// (binding::merge_batched_lse); a rank-2 lse (varlen q, attention_merge) passes through unchanged.
ga::TensorView lse_view(const OptOut& lse) {
  ga::TensorView t = to_view(lse, false, "lse");
  if (!ga::binding::merge_batched_lse(t)) {
    throw std::runtime_error("lse: internal error: a [B, Hq, Sq] lse whose B and Sq dims do not merge");
  }
  return t;
}

// Bit i of `bf16_mask` marks the i-th tensor argument (in signature order) as numpy bfloat16.
bool bit(uint32_t mask, int i) { return ((mask >> i) & 1u) != 0; }

double scale_or_default(std::optional<double> scale) { return scale ? *scale : NAN; }

ga::AttentionParams attention_params(const InArray& q, const InArray& k, const InArray& v,
                                     const OutArray& out, const OptOut& lse, const OptIn& cu_seqlens_q,
                                     const OptIn& cu_seqlens_k, const OptIn& seqlens_k,
                                     const OptIn& block_table, const OptIn& kv_shard_offset,
                                     const OptIn& kv_total_len, int64_t max_seqlen_q,
                                     int64_t max_seqlen_k, std::optional<double> scale, bool causal,
                                     int64_t window_left, int64_t window_right, double softcap,
                                     int num_splits, uint32_t bf16_mask, const OptIn& k_scale,
                                     const OptIn& v_scale, bool kv_scale_per_page) {
  ga::AttentionParams p;
  p.q = to_view(q, bit(bf16_mask, 0), "q");
  p.k = to_view(k, bit(bf16_mask, 1), "k");
  p.v = to_view(v, bit(bf16_mask, 2), "v");
  p.out = to_view(out, bit(bf16_mask, 3), "out");
  p.lse = lse_view(lse);
  p.cu_seqlens_q = to_view(cu_seqlens_q, false, "cu_seqlens_q");
  p.cu_seqlens_k = to_view(cu_seqlens_k, false, "cu_seqlens_k");
  p.seqlens_k = to_view(seqlens_k, false, "cache_seqlens");
  p.block_table = to_view(block_table, false, "block_table");
  p.kv_shard_offset = to_view(kv_shard_offset, false, "kv_shard_offset");
  p.kv_total_len = to_view(kv_total_len, false, "kv_total_len");
  p.k_scale = to_view(k_scale, false, "k_descale");
  p.v_scale = to_view(v_scale, false, "v_descale");
  ga::binding::set_attention_scalars(p, max_seqlen_q, max_seqlen_k, scale_or_default(scale), causal,
                                     window_left, window_right, softcap, num_splits, kv_scale_per_page);
  return p;
}

ga::KdaParams kda_params(const InArray& q, const InArray& k, const InArray& v, const InArray& g,
                         const InArray& beta, const OutArray& out, const OptIn& initial_state,
                         const OptOut& final_state, const OptIn& cu_seqlens,
                         const OptIn& state_indices, bool state_v_first, int gate,
                         const OptIn& A_log, const OptIn& dt_bias, double lower_bound,
                         bool use_qk_l2norm, bool use_beta_sigmoid, bool allow_neg_eigval,
                         std::optional<double> scale, uint32_t bf16_mask) {
  ga::KdaParams p;
  p.q = to_view(q, bit(bf16_mask, 0), "q");
  p.k = to_view(k, bit(bf16_mask, 1), "k");
  p.v = to_view(v, bit(bf16_mask, 2), "v");
  p.g = to_view(g, false, "g");
  p.beta = to_view(beta, false, "beta");
  p.out = to_view(out, bit(bf16_mask, 3), "out");
  p.initial_state = to_view(initial_state, false, "initial_state");
  p.final_state = to_view(final_state, false, "final_state");
  p.cu_seqlens = to_view(cu_seqlens, false, "cu_seqlens");
  p.state_indices = to_view(state_indices, false, "ssm_state_indices");
  p.A_log = to_view(A_log, false, "A_log");
  p.dt_bias = to_view(dt_bias, false, "dt_bias");
  if (!ga::binding::set_kda_scalars(p, state_v_first, gate, lower_bound, use_qk_l2norm, use_beta_sigmoid,
                                    allow_neg_eigval, scale_or_default(scale))) {
    throw nb::value_error(ga::binding::kBadGateMessage);
  }
  return p;
}

// The workspace is filled in by run_with_workspace when the selected engine asks for one.
ga::RunOptions run_options(const std::optional<std::string>& engine, uintptr_t stream) {
  ga::RunOptions o;
  o.engine = engine ? engine->c_str() : nullptr;
  o.stream = reinterpret_cast<void*>(stream);
  return o;
}

nb::list engine_list(ga::Op op) {
  nb::list out;
  for (const ga::EngineInfo& e : ga::list_engines(op)) {
    nb::dict d;
    d["name"] = e.name;
    d["description"] = e.description;
    d["supports"] = e.supports;
    d["available"] = e.available;
    d["unavailable_reason"] = e.unavailable_reason;
    out.append(d);
  }
  return out;
}


// ---------------------------------------------------------------------------------------------
// Single-entry calls: one crossing into the extension per op call. The params struct is built
// once and the op validates and selects once: when the selected engine needs a workspace, the
// library calls back (RunOptions::workspace_allocator) and the binding calls
// `alloc(nbytes) -> (keep_alive, pointer)`, the caller's framework's allocator, with the GIL
// re-acquired. (Before: an attention_workspace_bytes pass first, i.e. validation and selection
// twice per GPU call.)

// nullopt (None): a host call; the host engines need no workspace.
using OptAlloc = std::optional<nb::callable>;

// The Python allocator behind RunOptions::workspace_allocator. `keep` owns the workspace until the
// op call has returned (the frameworks' allocators are stream-ordered on the call's stream); an
// exception raised by the allocator is kept and re-raised once the op has returned.
struct PyWorkspace {
  const nb::callable* alloc = nullptr;
  nb::object keep;
  std::exception_ptr error;

  static ga::Status allocate(void* context, size_t bytes, void** ptr) {
    auto* w = static_cast<PyWorkspace*>(context);
    nb::gil_scoped_acquire gil;
    try {
      nb::tuple r = nb::borrow<nb::tuple>((*w->alloc)(bytes));
      w->keep = r[0];
      *ptr = reinterpret_cast<void*>(nb::cast<uintptr_t>(r[1]));
      return ga::Status::Ok();
    } catch (...) {
      w->error = std::current_exception();
      return {ga::StatusCode::kOutOfMemory, "the Python allocator raised"};
    }
  }
};

template <class Params, class RunFn>
void run_with_workspace(const Params& p, ga::RunOptions o, const OptAlloc& alloc, RunFn run_fn) {
  PyWorkspace ws;  // declared outside the GIL-free block: its objects die with the GIL held
  if (alloc) {
    ws.alloc = &*alloc;
    o.workspace_allocator = &PyWorkspace::allocate;
    o.workspace_allocator_context = &ws;
  }
  ga::Status s;
  {
    nb::gil_scoped_release release;
    s = run_fn(p, o);
  }
  if (ws.error) std::rethrow_exception(ws.error);
  check(s);
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "groupattn C++ binding (internal: use the groupattn package's functions)";

  m.def(
      "attention_workspace_bytes",
      [](const InArray& q, const InArray& k, const InArray& v, const OutArray& out, const OptOut& lse,
         const OptIn& cu_q, const OptIn& cu_k, const OptIn& seqlens_k, const OptIn& block_table,
         const OptIn& shard_offset, const OptIn& total_len, int64_t max_q, int64_t max_k, std::optional<double> scale, bool causal, int64_t wl,
         int64_t wr, double softcap, int num_splits, const std::optional<std::string>& engine,
         uint32_t bf16_mask, const OptIn& k_scale, const OptIn& v_scale, bool kv_scale_per_page) {
        const ga::AttentionParams p =
            attention_params(q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table, shard_offset,
                             total_len, max_q, max_k,
                             scale, causal, wl, wr, softcap, num_splits, bf16_mask, k_scale, v_scale,
                             kv_scale_per_page);
        size_t bytes = 0;
        check(ga::attention_workspace_bytes(p, run_options(engine, 0), &bytes));
        return bytes;
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("lse").none(),
      nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(), nb::arg("seqlens_k").none(),
      nb::arg("block_table").none(), nb::arg("kv_shard_offset").none(),
      nb::arg("kv_total_len").none(), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"),
      nb::arg("scale").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
      nb::arg("softcap"), nb::arg("num_splits"), nb::arg("engine").none(), nb::arg("bf16_mask"),
      nb::arg("k_scale").none(), nb::arg("v_scale").none(), nb::arg("kv_scale_per_page"));

  m.def(
      "attention_call",
      [](const InArray& q, const InArray& k, const InArray& v, const OutArray& out, const OptOut& lse,
         const OptIn& cu_q, const OptIn& cu_k, const OptIn& seqlens_k, const OptIn& block_table,
         const OptIn& shard_offset, const OptIn& total_len, int64_t max_q, int64_t max_k, std::optional<double> scale, bool causal, int64_t wl,
         int64_t wr, double softcap, int num_splits, const std::optional<std::string>& engine,
         uintptr_t stream, const OptAlloc& alloc, uint32_t bf16_mask, const OptIn& k_scale, const OptIn& v_scale,
         bool kv_scale_per_page) {
        const ga::AttentionParams p =
            attention_params(q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table, shard_offset,
                             total_len, max_q, max_k,
                             scale, causal, wl, wr, softcap, num_splits, bf16_mask, k_scale, v_scale,
                             kv_scale_per_page);
        run_with_workspace(p, run_options(engine, stream), alloc,
                           [](const ga::AttentionParams& pp, const ga::RunOptions& oo) { return ga::attention(pp, oo); });
      });

  m.def(
      "attention_engine_for",
      [](const InArray& q, const InArray& k, const InArray& v, const OutArray& out, const OptOut& lse,
         const OptIn& cu_q, const OptIn& cu_k, const OptIn& seqlens_k, const OptIn& block_table,
         const OptIn& shard_offset, const OptIn& total_len, int64_t max_q, int64_t max_k, std::optional<double> scale, bool causal, int64_t wl,
         int64_t wr, double softcap, int num_splits, const std::optional<std::string>& engine,
         uint32_t bf16_mask, const OptIn& k_scale, const OptIn& v_scale, bool kv_scale_per_page) {
        const ga::AttentionParams p =
            attention_params(q, k, v, out, lse, cu_q, cu_k, seqlens_k, block_table, shard_offset,
                             total_len, max_q, max_k,
                             scale, causal, wl, wr, softcap, num_splits, bf16_mask, k_scale, v_scale,
                             kv_scale_per_page);
        const char* name = nullptr;
        check(ga::attention_engine_for(p, run_options(engine, 0), &name));
        return std::string(name);
      });

  // attention_merge: o_partials [R, total_q, Hq, Dv] (fp32 or out's dtype), lse_partials fp32
  // [R, Hq, total_q] -> out, lse (optional). Host tensors merge in fp64 on the CPU; device tensors
  // run the combine kernel on `stream`. bf16_mask: bit 0 = o_partials, bit 1 = out (numpy bf16).
  m.def(
      "attention_merge",
      [](const InArray& o_partials, const InArray& lse_partials, const OutArray& out,
         const OptOut& lse, uintptr_t stream, uint32_t bf16_mask) {
        ga::MergeParams p;
        p.o_partials = to_view(o_partials, bit(bf16_mask, 0), "o_partials");
        p.lse_partials = to_view(lse_partials, false, "lse_partials");
        p.out = to_view(out, bit(bf16_mask, 1), "out");
        p.lse = lse_view(lse);
        ga::RunOptions o;
        o.stream = reinterpret_cast<void*>(stream);
        ga::Status s;
        {
          nb::gil_scoped_release release;
          s = ga::attention_merge(p, o);
        }
        check(s);
      },
      nb::arg("o_partials"), nb::arg("lse_partials"), nb::arg("out"), nb::arg("lse").none(),
      nb::arg("stream"), nb::arg("bf16_mask"));

  m.def(
      "kda_call",
      [](const InArray& q, const InArray& k, const InArray& v, const InArray& g, const InArray& beta,
         const OutArray& out, const OptIn& initial_state, const OptOut& final_state,
         const OptIn& cu_seqlens, const OptIn& state_indices, bool state_v_first, int gate,
         const OptIn& A_log, const OptIn& dt_bias, double lower_bound, bool l2norm,
         bool beta_sigmoid, bool neg_eigval, std::optional<double> scale,
         const std::optional<std::string>& engine, uintptr_t stream, const OptAlloc& alloc,
         uint32_t bf16_mask) {
        const ga::KdaParams p = kda_params(q, k, v, g, beta, out, initial_state, final_state,
                                           cu_seqlens, state_indices, state_v_first, gate, A_log,
                                           dt_bias, lower_bound, l2norm, beta_sigmoid, neg_eigval,
                                           scale, bf16_mask);
        run_with_workspace(p, run_options(engine, stream), alloc,
                           [](const ga::KdaParams& pp, const ga::RunOptions& oo) { return ga::kda(pp, oo); });
      });

  m.def(
      "kda_engine_for",
      [](const InArray& q, const InArray& k, const InArray& v, const InArray& g, const InArray& beta,
         const OutArray& out, const OptIn& initial_state, const OptOut& final_state,
         const OptIn& cu_seqlens, const OptIn& state_indices, bool state_v_first, int gate,
         const OptIn& A_log, const OptIn& dt_bias, double lower_bound, bool l2norm,
         bool beta_sigmoid, bool neg_eigval, std::optional<double> scale,
         const std::optional<std::string>& engine, uint32_t bf16_mask) {
        const ga::KdaParams p = kda_params(q, k, v, g, beta, out, initial_state, final_state,
                                           cu_seqlens, state_indices, state_v_first, gate, A_log,
                                           dt_bias, lower_bound, l2norm, beta_sigmoid, neg_eigval,
                                           scale, bf16_mask);
        const char* name = nullptr;
        check(ga::kda_engine_for(p, run_options(engine, 0), &name));
        return std::string(name);
      });

  m.def("engines", [] {
    nb::dict d;
    d["attention"] = engine_list(ga::Op::kAttention);
    d["kda"] = engine_list(ga::Op::kKda);
    return d;
  }, "Engines of each op in this build, in selection order.");

  m.def("build_info", [] {
    const ga::BuildInfo b = ga::build_info();
    nb::dict d;
    d["version"] = b.version;
    d["cuda_compiled"] = b.cuda_compiled;
    d["cuda_archs"] = b.cuda_archs;
    return d;
  });

  m.def("cuda_device_available", &ga::cuda_device_available);
}
