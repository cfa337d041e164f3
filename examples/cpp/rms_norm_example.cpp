// RMSNorm forward and backward through the plain C++ API: no PyTorch, no CUDA needed.
#include <tigon/tigon.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using tigon::DType;
  using tigon::TensorView;
  constexpr std::int64_t rows = 4, hidden = 8;

  std::vector<float> x(rows * hidden), weight(hidden, 1.0f), y(rows * hidden), rstd(rows);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i));

  tigon::RmsNormParams params;  // Llama semantics, eps 1e-6, no offset
  params.eps = 1e-6f;
  const auto xv = TensorView::contiguous(x.data(), DType::kFloat32, {rows, hidden});
  const auto wv = TensorView::contiguous(weight.data(), DType::kFloat32, {hidden});
  try {
    // The caller owns each workspace, sized by its query (the forward's is 0 except for very long
    // rows on GPUs without thread-block clusters; ask anyway).
    std::vector<unsigned char> fwd_workspace(tigon::rms_norm_fwd_workspace_size(params, xv, wv));
    tigon::rms_norm_fwd(params, xv, wv,
                        TensorView::contiguous(y.data(), DType::kFloat32, {rows, hidden}),
                        TensorView::contiguous(rstd.data(), DType::kFloat32, {rows}),
                        {fwd_workspace.data(), fwd_workspace.size()});

    // Backward of sum(y): dy = 1.
    std::vector<float> dy(rows * hidden, 1.0f), dx(rows * hidden), dw(hidden);
    std::vector<unsigned char> workspace(tigon::rms_norm_bwd_workspace_size(params, xv, wv));
    tigon::rms_norm_bwd(params, TensorView::contiguous(dy.data(), DType::kFloat32, {rows, hidden}),
                        xv, wv, TensorView::contiguous(rstd.data(), DType::kFloat32, {rows}),
                        TensorView::contiguous(dx.data(), DType::kFloat32, {rows, hidden}),
                        TensorView::contiguous(dw.data(), DType::kFloat32, {hidden}),
                        {workspace.data(), workspace.size()});

    // Each normalized row has mean square 1.
    for (std::int64_t r = 0; r < rows; ++r) {
      float mean_square = 0.0f;
      for (std::int64_t j = 0; j < hidden; ++j)
        mean_square += y[r * hidden + j] * y[r * hidden + j];
      mean_square /= hidden;
      std::printf("row %lld: rstd %.6f, mean(y^2) %.6f\n", static_cast<long long>(r), rstd[r],
                  mean_square);
      if (std::fabs(mean_square - 1.0f) > 1e-4f) return 1;
    }
    std::printf("dw[0] = %.6f; tigon %s, CUDA backend: %s\n", dw[0], tigon::version(),
                tigon::has_cuda_backend() ? "yes" : "no");

    // Bad input is an exception naming the argument.
    tigon::rms_norm_fwd(params, xv,
                        TensorView::contiguous(weight.data(), DType::kFloat32, {hidden - 1}),
                        TensorView::contiguous(y.data(), DType::kFloat32, {rows, hidden}),
                        TensorView::contiguous(rstd.data(), DType::kFloat32, {rows}));
    return 1;
  } catch (const tigon::Error& e) {
    std::printf("as expected: %s\n", e.what());
  }
  return 0;
}
