// GroupNorm (torch.nn.GroupNorm): the C channels of x [N, C, *] split into G groups of C / G
// consecutive channels; each (sample, group) is normalized over its (C / G) * S elements (S the
// product of the dimensions after C, 1 for a [N, C] input), then scaled and shifted per channel:
//     y[n, c, s] = (x[n, c, s] - mean[n, g]) * rstd[n, g] * w[c] + b[c],   g = c / (C / G)
//     mean = sum(x) / L,  rstd = 1 / sqrt(var + eps),  var = sum((x - mean)^2) / L  (biased),
//     L = (C / G) * S.
//
// Shapes: x is [N, C, d1, ...] (2 or more dimensions). Each sample x[n] must be contiguous (the
// (C, d1, ...) part in row-major order, so that a group is one contiguous run of L elements);
// samples may have any stride (a slice of a batch). y has x's shape, x's dtype and its own sample
// stride (samples contiguous). weight and bias are [C] and contiguous, each optional (absent: 1
// and 0), in x's dtype or float32. mean and rstd are [N, G] float32, contiguous (PyTorch's
// native_group_norm saves the same, in x's dtype for 16-bit x: tigon keeps float32).
//
// Where each rounding happens: LayerNorm's formulas (include/tigon/ops/layer_norm.h) with a row
// being one (sample, group) and the weight and bias of each element's channel. T = x's dtype;
// every operation not marked round_ is float32, none contracted into a fused multiply-add:
//     mean = sum(x) / L,  var = sum((x - mean) * (x - mean)) / L,  rstd = 1 / sqrt(var + eps)
//     y    = round_T(((x - mean) * rstd) * w[c] + b[c])
// PyTorch forms y as x * a + (b[c] - a * mean) with a = rstd * w[c] (ATen's group_norm kernels):
// the same value up to float32 rounding, so y agrees bitwise on almost every element and by at
// most 1 ulp of T except where y cancels to a tiny value (see LayerNorm's header for why tigon's
// form is the more accurate one). Sums have a fixed order on each backend.
//
// Backward, all float32, per (sample, channel) first (the order PyTorch's kernels use too):
//     A[n, c] = sum over s of dy * xhat,   B[n, c] = sum over s of dy   (xhat = (x - mean) * rstd)
//     per (sample, group): c1 = sum over its channels of w[c] * A[n, c] / L,
//                          c2 = sum over its channels of w[c] * B[n, c] / L
//     dx = round_T(rstd * ((dy * w[c] - c2) - xhat * c1))
//     dw[c] = round_Tw(sum over n of A[n, c]),  db[c] = round_Tb(sum over n of B[n, c])
// A and B live in the workspace; dw and db add them over samples in sample order: the same bits
// run to run and for any launch choice. dx may alias dy (same data and layout).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/tensor.h"

namespace tigon {

struct GroupNormParams {
  std::int64_t groups = 1;  // G >= 1, divides C
  float eps = 1e-5f;        // >= 0
};

// Scratch bytes group_norm_fwd needs (currently 0 on every backend; always ask).
std::size_t group_norm_fwd_workspace_size(const GroupNormParams& params, const TensorView& x);

void group_norm_fwd(const GroupNormParams& params, const TensorView& x, const TensorView& weight,
                    const TensorView& bias, const TensorView& y, const TensorView& mean,
                    const TensorView& rstd, Workspace workspace = {}, Stream stream = {});

// Scratch bytes group_norm_bwd needs: the float32 per-(sample, channel) sums A and B, a function
// of the shapes and of the device only.
std::size_t group_norm_bwd_workspace_size(const GroupNormParams& params, const TensorView& x);

// dy and dx have x's shape and dtype (dx may be dy itself). dw is [C] in the weight's dtype and
// must be given exactly when there is a weight. db is [C] in x's dtype or float32 (the bias's),
// optional: absent, no dB is computed. With zero samples, dw and db are zeros.
void group_norm_bwd(const GroupNormParams& params, const TensorView& dy, const TensorView& x,
                    const TensorView& weight, const TensorView& mean, const TensorView& rstd,
                    const TensorView& dx, const TensorView& dw, const TensorView& db,
                    Workspace workspace, Stream stream = {});

}  // namespace tigon
