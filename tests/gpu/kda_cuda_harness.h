// KDA problems on the host and their device mirrors, for the GPU fuzz tier and the KDA reliability
// tests: a KdaCase (tests/cpu/kda_test_case.h) optionally turned into a state pool updated in place
// (state_indices, shuffled rows, spare rows) and/or strided views, mirrored on the device, and a
// comparison against the fp64 per-token recurrence that returns its findings as text instead of
// adding gtest failures (the fuzz tier prints one line per failing case).
// kda_cuda_test.cpp uses the same run type (as KdaRun) with its own gtest assertions.
#pragma once

#if GROUPATTN_WITH_CUDA

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/device_tensor.h"
#include "common/host_tensor.h"
#include "cpu/kda_test_case.h"
#include "groupattn/kda.h"

namespace groupattn::test {

constexpr double kKdaGpuRelTol = 5e-3;  // TESTING.md: relative RMS, output and final state

struct KdaGpuRun {
  KdaCase c;
  bool pool = false;  // states are a pool updated in place; sequence n uses row idx[n]
  HostTensor idx;     // state_indices, int32 [N]
  int stride_pad = 8;  // elements added to every non-last stride by setup(..., strided = true)
  std::unique_ptr<DeviceTensor> dq, dk, dv, dg, dbeta, dout, dinit, dfinal, dAlog, ddt, dcu, didx;

  // Builds c from `seed`. pool_extra >= 0: the states become a pool of N + pool_extra rows
  // (random initial rows, shuffled state_indices), initial_state == final_state on the device.
  // strided: every non-last stride of every float tensor padded by stride_pad elements (gaps NaN).
  // upload = false keeps host tensors only (new inputs for a captured graph).
  void setup(uint64_t seed, int pool_extra, bool strided = false, bool upload = true);
  void upload();
  KdaParams host_params() const;
  KdaParams device_params() const;
  int64_t row(int64_t n) const;
  // The device's final states (or pool rows) gathered per sequence as [N, HV, K, V], the
  // reference's order; empty when the call writes no final state.
  std::vector<double> final_states() const;
  // Host tensors that are inputs, paired with the device tensors holding them (same shapes and
  // strides), for copying new inputs into captured buffers. Outputs excluded.
  std::vector<std::pair<const HostTensor*, const DeviceTensor*>> inputs() const;
};

std::string kda_describe(const KdaCase& c, const std::string& extra);

// Compares the device results of `dev` (out, and final states or the pool) with the fp64
// recurrence on `ref`'s host tensors (`ref` and `dev` may be the same; for graph replays `ref`
// holds the new inputs and `dev` the captured buffers). With a pool, rows no sequence names must
// still hold ref's initial pool bit for bit. Checks every guard band. Returns "" when everything
// passes, else the findings ("; "-separated). out_err / state_err: relative RMS (may be null).
std::string kda_compare(const KdaGpuRun& ref, const KdaGpuRun& dev, double* out_err = nullptr,
                        double* state_err = nullptr);

}  // namespace groupattn::test

#endif  // GROUPATTN_WITH_CUDA
