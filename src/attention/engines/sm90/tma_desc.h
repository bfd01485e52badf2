// Host side of TMA for the sm90 decode engine: one rank-4 tensor map per K and per V, built per
// call (cuTensorMapEncodeTiled, fetched once through the runtime so no -lcuda is needed) and
// passed to the kernel as a __grid_constant__ parameter.
//
//   batched K [B][Sk][Hkv][D]          dims {D, Hkv, Sk, B}
//   paged   K [pages][page_size][Hkv][D] dims {D, Hkv, page_size, pages}
// Box {64, 1, rows, 1}: 64 head-dim elements (128 bytes, the 128B swizzle span) of one KV head for
// `rows` consecutive keys, landing as [rows keys][64 d] with 128-byte rows, swizzled; a K or V
// tile is D / 64 boxes (d = 0..63, 64..127, ...; D = 64, 128 or 256) of rows = 64, or for paged
// K/V with small pages 64 / rows such stacks of rows = gcd(page_size, 64) (decode_mainloop.cuh,
// produce()). Keys past the tensor's end arrive as zeros.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "groupattn/status.h"
#include "groupattn/tensor.h"

namespace groupattn::sm90_engine {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Strides in elements (as TensorView keeps them); the element stride of d must be 1.
struct KvMapShape {
  const void* base = nullptr;
  bool bf16 = true;
  // f8e4m3 (EXPERIMENTAL): 1-byte elements, box {128, 1, rows, 1}: one whole head row is 128
  // bytes, exactly one 128B-swizzle row, so the tile lands as [rows][128 d] with 16-byte chunk c
  // of row r at chunk c ^ (r % 8); the consumers' register loads index it with the same XOR.
  bool fp8 = false;
  int64_t d = 128;                                    // head dim (a multiple of 64 for 16-bit maps)
  int64_t heads = 0, rows = 0, outer = 0;             // Hkv, Sk or page_size, B or pages
  int64_t head_stride = 0, row_stride = 0, outer_stride = 0;
};

inline Status encode_kv_map(const KvMapShape& s, int box_rows, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return Status(StatusCode::kCudaError, "sm90 engine: cuTensorMapEncodeTiled not found");
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.d), static_cast<cuuint64_t>(s.heads),
                              static_cast<cuuint64_t>(s.rows), static_cast<cuuint64_t>(s.outer)};
  const cuuint64_t esize = s.fp8 ? 1 : 2;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.head_stride) * esize,
                                 static_cast<cuuint64_t>(s.row_stride) * esize,
                                 static_cast<cuuint64_t>(s.outer_stride) * esize};  // bytes, dims 1..3
  const cuuint32_t box[4] = {s.fp8 ? 128u : 64u, 1, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = s.fp8    ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : s.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(map, type, 4, const_cast<void*>(s.base), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, "sm90 engine: cuTensorMapEncodeTiled failed (CUresult " +
                                              std::to_string(static_cast<int>(r)) + ")");
  return Status::Ok();
}

// The map of a rank-4 (outer, row, head, d) view -- Q [B, Sq, Hq, D], K/V [B, Sk, Hkv, D] or
// paged [pages, page_size, Hkv, D] -- with boxes of `box_rows` rows of one head. A rank-3 varlen
// view [total tokens, H, D] maps as outer = 1 (coordinates: row = token, outer = 0).
inline Status encode_map_of(const TensorView& t, int box_rows, CUtensorMap* map) {
  KvMapShape shape;
  shape.base = t.data;
  shape.bf16 = t.dtype == DType::kBF16;
  shape.fp8 = t.dtype == DType::kF8E4M3;
  if (t.rank == 4) {
    shape.d = t.shape[3];
    shape.heads = t.shape[2];
    shape.rows = t.shape[1];
    shape.outer = t.shape[0];
    shape.head_stride = t.stride[2];
    shape.row_stride = t.stride[1];
    shape.outer_stride = t.stride[0];
  } else {  // rank 3 (varlen): one outer index; any stride spanning the rows will do
    shape.d = t.shape[2];
    shape.heads = t.shape[1];
    shape.rows = t.shape[0];
    shape.outer = 1;
    shape.head_stride = t.stride[1];
    shape.row_stride = t.stride[0];
    shape.outer_stride = shape.rows * shape.row_stride;
  }
  return encode_kv_map(shape, box_rows, map);
}

}  // namespace groupattn::sm90_engine
