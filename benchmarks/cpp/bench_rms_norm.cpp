// RMSNorm through the C++ API on the CPU (Google Benchmark): forward and backward, float32 and
// bfloat16, hidden 1024..16384 at 4096 rows. Reports bytes/s over the necessary bytes.
#include <benchmark/benchmark.h>
#include <tigon/tigon.h>

#include <cstdint>
#include <vector>

namespace {

using tigon::DType;
using tigon::TensorView;

struct Buffers {
  std::int64_t rows, hidden;
  DType dtype;
  std::vector<std::uint8_t> x, w, y, dy, dx, dw, ws;
  std::vector<float> rstd;
  tigon::RmsNormParams params;

  Buffers(std::int64_t m, std::int64_t h, DType t) : rows(m), hidden(h), dtype(t), rstd(m) {
    const std::size_t bytes = static_cast<std::size_t>(m * h) * tigon::element_size(t);
    x.assign(bytes, 0x3f);  // every byte 0x3f: finite, non-zero values in all three dtypes
    dy.assign(bytes, 0x3e);
    y.resize(bytes);
    dx.resize(bytes);
    w.assign(h * tigon::element_size(t), 0x3f);
    dw.resize(w.size());
    ws.resize(tigon::rms_norm_bwd_workspace_size(params, view(x), weight(w)));
  }
  TensorView view(std::vector<std::uint8_t>& b) {
    return TensorView::contiguous(b.data(), dtype, {rows, hidden});
  }
  TensorView weight(std::vector<std::uint8_t>& b) {
    return TensorView::contiguous(b.data(), dtype, {hidden});
  }
  TensorView rstd_view() { return TensorView::contiguous(rstd.data(), DType::kFloat32, {rows}); }
};

void forward(benchmark::State& state, DType dtype) {
  Buffers b(4096, state.range(0), dtype);
  for (auto _ : state) {
    tigon::rms_norm_fwd(b.params, b.view(b.x), b.weight(b.w), b.view(b.y), b.rstd_view());
  }
  state.SetBytesProcessed(state.iterations() * 2 * b.x.size());
}

void backward(benchmark::State& state, DType dtype) {
  Buffers b(4096, state.range(0), dtype);
  tigon::rms_norm_fwd(b.params, b.view(b.x), b.weight(b.w), b.view(b.y), b.rstd_view());
  for (auto _ : state) {
    tigon::rms_norm_bwd(b.params, b.view(b.dy), b.view(b.x), b.weight(b.w), b.rstd_view(),
                        b.view(b.dx), b.weight(b.dw), {b.ws.data(), b.ws.size()});
  }
  state.SetBytesProcessed(state.iterations() * 3 * b.x.size());
}

BENCHMARK_CAPTURE(forward, float32, DType::kFloat32)
    ->RangeMultiplier(2)
    ->Range(1024, 16384)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(forward, bfloat16, DType::kBFloat16)
    ->RangeMultiplier(2)
    ->Range(1024, 16384)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(backward, float32, DType::kFloat32)
    ->RangeMultiplier(2)
    ->Range(1024, 16384)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(backward, bfloat16, DType::kBFloat16)
    ->RangeMultiplier(2)
    ->Range(1024, 16384)
    ->Unit(benchmark::kMillisecond);

}  // namespace
