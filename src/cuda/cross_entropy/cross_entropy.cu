// Cross-entropy CUDA backend entry points: prepare (denominators, float32 class weights), the row
// kernels (one-read slices where rows fit, else two passes), and the final sum, all on the
// caller's stream, inside the caller's workspace. Never allocates and never synchronizes
// (CUDA-graph capturable).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/occupancy.h"
#include "cuda/cross_entropy/kernels.cuh"
#include "cuda/cross_entropy/slice_kernel.cuh"
#include "cuda/cross_entropy/slice_plan.h"
#include "cuda/cross_entropy/steps.h"
#include "ops/cross_entropy_args.h"

namespace tigon::cuda {
namespace {

using namespace tigon::cuda::cross_entropy;
using detail::CrossEntropyArgs;

// Shared memory per CTA for the row copy between the passes, besides the cp.async ring (two CTAs
// per SM: 2 x (80 + 32) KB of the 228 KB).
constexpr std::size_t kCacheBytes = 80 * 1024;

bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

Layout layout_of(const CrossEntropyArgs& a, bool forward, int device) {
  Layout l;
  l.rows = a.rows;
  l.vocab = a.vocab;
  l.forward = forward;
  l.weighted = a.weight != nullptr;
  l.slices = !device_properties(device).clusters;
  return l;
}

void prepare_into(const CrossEntropyArgs& a, float* header, float* weights_f32, cudaStream_t s) {
  auto launch = [&](auto w_tag) {
    using W = typename decltype(w_tag)::type;
    launch_kernel(ce_prepare_kernel<W>, 1, dim3(kReduceThreads), 0, 1, s, a.target, a.rows,
                  a.params.ignore_index, static_cast<const W*>(a.weight), a.vocab,
                  static_cast<int>(a.params.reduction), a.divisor, header, weights_f32);
  };
  if (a.weight == nullptr) {
    launch(detail::TypeTag<float>{});
  } else {
    detail::dispatch_dtype(a.weight_dtype, launch);
  }
}

// The slice kernel's dynamic shared memory limit on `device`: kMaxSliceBytes, or less where the
// device's opt-in limit per CTA (less its static shared memory) is lower (e.g. sm_86: 99 KB).
std::size_t max_slice_bytes(int device) {
  constexpr std::size_t kStatic = 4096;  // the kernel's static shared memory (1.7 KB), rounded up
  return std::min(kMaxSliceBytes, max_dynamic_smem(device, kStatic));
}

// `dependent`: launched right behind ce_prepare_kernel as its programmatic dependent
// (launch_dependent_kernel): the kernels wait for it before they read the header.
template <typename T, int P, RowMode kMode, bool kPlain>
void launch_rows_as(const RowParams& p, bool dependent, int device, cudaStream_t s) {
  const auto kernel = ce_row_kernel<T, P, kMode, kPlain>;
  constexpr bool kStreamed = kMode != RowMode::kGrad && sizeof(T) * P == 16;
  const std::size_t smem =
      (kStreamed ? kRingBytes : 0) + static_cast<std::size_t>(p.cache_packs) * P * sizeof(T);
  if (smem > 0) {
    static std::atomic<std::uint64_t> configured{0};
    configure_once(kernel, configured, device, kRingBytes + kCacheBytes, false);
  }
  const std::int64_t grid =
      std::min<std::int64_t>(p.rows, 2 * std::int64_t{device_properties(device).sm_count});
  launch_dependent_kernel(kernel, grid, dim3(kRowThreads), smem, 1, dependent, s, p);
}

// The slice kernel on a persistent grid: as many clusters as are resident at once (the runtime
// knows how they pack into GPCs), at most one per row. Each row's bits depend only on the plan
// (V and the dtype), never on the grid. False if not even one cluster fits.
template <typename T, RowMode kMode, bool kPlain>
bool launch_slices_as(const RowParams& p, bool dependent, int device, cudaStream_t s) {
  const auto kernel = ce_slice_kernel<T, kMode, kPlain>;
  static std::atomic<std::uint64_t> configured{0};
  configure_once(kernel, configured, device, max_slice_bytes(device), true);
  const std::size_t smem = static_cast<std::size_t>(p.slice_packs) * kSlicePackBytes;
  const int hw_cluster = p.slice_pass == SlicePass::kCluster ? p.cluster : 1;
  const std::int64_t resident = resident_clusters(reinterpret_cast<const void*>(kernel),
                                                  dim3(kSliceThreads), smem, hw_cluster, device) /
                                (p.cluster / hw_cluster);
  if (resident < 1) return false;
  const std::int64_t clusters = std::min({p.rows, resident, kMaxGridBlocks / p.cluster});
  launch_dependent_kernel(kernel, clusters * p.cluster, dim3(kSliceThreads), smem, hw_cluster,
                          dependent, s, p);
  return true;
}

// Whether prepare -> rows -> finish run as programmatic dependent launches on `device`.
bool dependent_launches(int device) { return dependent_launch_available(device); }

// Without softcap, label smoothing, class weights and predictions the row kernels have no
// per-element branches; nor per-row factors (token scales, an upstream gradient for forward rows)
// after the row's sums.
template <RowMode kMode>
bool plain_rows(const RowParams& p) {
  const bool forward_upstream = kMode != RowMode::kGrad && p.grad_loss != nullptr;
  return !(p.softcap > 0.0f) && p.label_smoothing == 0.0f && p.weights == nullptr &&
         p.token_scale == nullptr && !p.token_scale_by_target_prob && !forward_upstream &&
         !p.argmax;
}

template <typename T, int P, RowMode kMode>
void launch_rows(const RowParams& p, bool dependent, int device, cudaStream_t s) {
  if (plain_rows<kMode>(p)) {
    launch_rows_as<T, P, kMode, true>(p, dependent, device, s);
  } else {
    launch_rows_as<T, P, kMode, false>(p, dependent, device, s);
  }
}

template <typename T, RowMode kMode>
bool launch_slices(const RowParams& p, bool dependent, int device, cudaStream_t s) {
  if (plain_rows<kMode>(p)) return launch_slices_as<T, kMode, true>(p, dependent, device, s);
  return launch_slices_as<T, kMode, false>(p, dependent, device, s);
}

// Rows over several CTAs without clusters (slice_pass.h): the CTAs' results through
// p.slice_states, published by a loss-only launch (whose pass 1 refills the slices as the row
// kernel's loss rows do; its results are the loss rows', hence the gradient launch's), then
// folded by the launch of the requested mode.
template <typename T, RowMode kMode>
bool launch_unclustered_slices(RowParams p, bool dependent, int device, cudaStream_t s) {
  p.slice_pass = SlicePass::kPublish;
  if (!launch_slices<T, RowMode::kLoss>(p, dependent, device, s)) return false;
  p.slice_pass = SlicePass::kGather;
  return launch_slices<T, kMode>(p, false, device, s);
}

// 16-byte packs need V, both row strides and both base pointers to be multiples of 16 bytes.
bool vector_rows(const CrossEntropyArgs& a, std::int64_t vec) {
  return a.vocab % vec == 0 && aligned(a.logits, 16) &&
         (a.rows == 1 || a.logits_row_stride % vec == 0) &&
         (a.grad == nullptr ||
          (aligned(a.grad, 16) && (a.rows == 1 || a.grad_row_stride % vec == 0)));
}

// `slice_states`: RowTerms::slices where the device has no clusters (null where it has them).
template <RowMode kMode>
void run_rows(const CrossEntropyArgs& a, RowParams p, float* slice_states, bool behind_prepare,
              int device, cudaStream_t s) {
  const bool dependent = behind_prepare && dependent_launches(device);
  detail::dispatch_dtype(a.logits_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = static_cast<int>(16 / sizeof(T));
    if constexpr (kMode != RowMode::kGrad) {
      const cross_entropy::SlicePlan plan = cross_entropy::forward_slice_plan(a, device);
      if (plan.cluster > 0) {
        p.cluster = plan.cluster;
        p.slice_packs = plan.slice_packs;
        if (plan.cluster > 1 && slice_states != nullptr) {
          p.slice_states = slice_states;
          if (launch_unclustered_slices<T, kMode>(p, dependent, device, s)) return;
        } else if (launch_slices<T, kMode>(p, dependent, device, s)) {
          return;
        }
      }
    }
    const bool vec = vector_rows(a, kVec);
    const int pack = vec ? kVec : 1;
    p.cache_packs = kMode == RowMode::kLossGrad
                        ? std::min<std::int64_t>(a.vocab / pack, kCacheBytes / (pack * sizeof(T)))
                        : 0;
    if (vec) {
      launch_rows<T, kVec, kMode>(p, dependent, device, s);
    } else {
      launch_rows<T, 1, kMode>(p, dependent, device, s);
    }
  });
}

RowParams row_params(const CrossEntropyArgs& a, const float* header, const float* weights,
                     float* row_ce, float* row_z) {
  RowParams p{};
  p.logits = a.logits;
  p.logits_row_stride = a.logits_row_stride;
  p.target = a.target;
  p.grad = a.grad;
  p.grad_row_stride = a.grad_row_stride;
  p.rows = a.rows;
  p.vocab = a.vocab;
  p.ignore_index = a.params.ignore_index;
  p.label_smoothing = a.params.label_smoothing;
  p.lse_square_scale = a.params.lse_square_scale;
  p.softcap = a.params.softcap;
  p.scales = header;
  p.weights = a.weight ? weights : nullptr;
  p.row_ce = row_ce;
  p.row_z = row_z;
  p.lse = a.lse;
  p.grad_loss = a.grad_loss;
  p.per_row_upstream = a.params.reduction == Reduction::kNone;
  p.token_scale = a.token_scale;
  p.token_scale_by_target_prob = a.token_scale_by_target_prob;
  return p;
}

}  // namespace

namespace cross_entropy {

SlicePlan forward_slice_plan(const CrossEntropyArgs& a, int device) {
  const auto vec = static_cast<std::int64_t>(kSlicePackBytes / element_size(a.logits_dtype));
  if (a.rows == 0 || !vector_rows(a, vec)) return {};
  // The plan is the shape's on every GPU: one without clusters runs its CTAs through the slice
  // results (slice_pass.h), so that a row's bits never depend on the GPU.
  const SlicePlan plan = slice_plan(a.vocab / vec, kMaxCluster);
  if (plan.cluster > kRowKernelAboveCluster) return {};
  return plan.smem_bytes() <= max_slice_bytes(device) ? plan : SlicePlan{};
}

void prepare(const CrossEntropyArgs& all_rows, float* header, float* weights_f32,
             cudaStream_t stream) {
  prepare_into(all_rows, header, weights_f32, stream);
}

void forward_rows(const CrossEntropyArgs& a, const float* header, const float* weights_f32,
                  detail::RowTerms terms, bool behind_prepare, int device, cudaStream_t s) {
  if (a.rows == 0) return;
  RowParams p = row_params(a, header, weights_f32, terms.ce, terms.z);
  const bool none = a.params.reduction == Reduction::kNone;
  if (none) {
    p.loss_rows = a.loss;
    p.z_rows = a.z_loss;
  }
  p.predicted = a.predicted;
  if (a.accuracy != nullptr) p.row_hit = none ? a.accuracy : terms.hit;
  p.argmax = a.predicts();
  if (a.grad != nullptr) {
    run_rows<RowMode::kLossGrad>(a, p, terms.slices, behind_prepare, device, s);
  } else {
    run_rows<RowMode::kLoss>(a, p, terms.slices, behind_prepare, device, s);
  }
}

void finish(const CrossEntropyArgs& all_rows, const float* header, detail::RowTerms terms,
            bool behind_rows, int device, cudaStream_t s) {
  const CrossEntropyArgs& a = all_rows;
  launch_dependent_kernel(ce_finish_kernel, 1, dim3(kReduceThreads), 0, 1,
                          behind_rows && dependent_launches(device), s, header, terms.ce, terms.z,
                          terms.hit, a.rows, a.loss, a.z_loss, a.accuracy);
}

}  // namespace cross_entropy

std::size_t cross_entropy_workspace_size(const CrossEntropyArgs& a, bool forward, int device) {
  return static_cast<std::size_t>(layout_of(a, forward, device).floats()) * sizeof(float);
}

void cross_entropy_fwd(const CrossEntropyArgs& a, int device, void* stream) {
  cross_entropy::fwd_with_clusters(a, device_properties(device).clusters, device, stream);
}

namespace cross_entropy {

void fwd_with_clusters(const CrossEntropyArgs& a, bool clusters, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  Layout l = layout_of(a, true, device);
  l.slices = !clusters;
  float* ws = static_cast<float*>(a.workspace);
  float* row_terms = ws + Layout::kHeader;
  const detail::RowTerms terms{row_terms, row_terms + a.rows, row_terms + 2 * a.rows,
                               l.slices ? ws + l.slices_offset() : nullptr};
  cross_entropy::prepare(a, ws, ws + l.weights_offset(), s);
  // prepare -> rows -> finish as a chain of dependent launches: the rows' first pass overlaps
  // prepare, and finish is launched before the rows end.
  cross_entropy::forward_rows(a, ws, ws + l.weights_offset(), terms, true, device, s);
  if (a.params.reduction != Reduction::kNone) {
    cross_entropy::finish(a, ws, terms, a.rows > 0, device, s);
  }
}

}  // namespace cross_entropy

void cross_entropy_bwd(const CrossEntropyArgs& a, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  const Layout l = layout_of(a, false, device);
  float* ws = static_cast<float*>(a.workspace);
  cross_entropy::prepare(a, ws, ws + l.weights_offset(), s);
  run_rows<RowMode::kGrad>(a, row_params(a, ws, ws + l.weights_offset(), nullptr, nullptr), nullptr,
                           true, device, s);
}

void cross_entropy_scale_grad(const detail::ScaleGradArgs& a, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = static_cast<int>(16 / sizeof(T));
    const bool vec =
        a.vocab % kVec == 0 && aligned(a.grad, 16) && (a.rows == 1 || a.row_stride % kVec == 0);
    const std::int64_t grid = 8 * std::int64_t{device_properties(device).sm_count};
    if (vec) {
      launch_kernel(ce_scale_kernel<T, kVec>, grid, dim3(256), 0, 1, s, static_cast<T*>(a.grad),
                    a.rows, a.vocab, a.row_stride, a.scale);
    } else {
      launch_kernel(ce_scale_kernel<T, 1>, grid, dim3(256), 0, 1, s, static_cast<T*>(a.grad),
                    a.rows, a.vocab, a.row_stride, a.scale);
    }
  });
}

}  // namespace tigon::cuda
