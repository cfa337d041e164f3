// GPU tests of the SwiGLU / GeGLU CUDA backend against the CPU backend on the same inputs, for
// every dtype and activation, odd widths, unaligned pointers, strided rows (gate_up halves), in
// place, determinism, > 2^31 elements. The device uses CUDA's expf/tanhf with FMA contraction (as
// PyTorch's CUDA kernels, which tests/python/test_glu_ops.py matches bit for bit) and the host
// tigon's own exp/tanh, so the two agree within float32 ulps before the final rounding: nearly
// every element is bitwise equal, the rest within a rounding of T. And against the exact device
// math (glu_exact_reference.cu), bit for bit: every 16-bit value of a crossed with random and
// special b and dy, which proves the kernels' fast gate (cuda/glu/glu_fast.cuh) exhaustively.
// Without a CUDA device every test reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.h"
#include "cuda/glu_exact_reference.h"
#include "math/float_types.h"
#include "math/glu.h"
#include "tigon/tigon.h"

namespace {

using tigon::Device;
using tigon::DType;
using tigon::GluActivation;
using tigon::TensorView;
using tigon::testing::cuda_ok;
using tigon::testing::DeviceBuffer;

// One buffer holding a [rows, width] view at element `offset` with row stride `stride`.
struct Layout {
  std::int64_t rows, width, stride, offset;
  std::int64_t elements() const { return offset + (rows - 1) * stride + width; }
  TensorView view(void* base, DType t, Device d) const {
    TensorView v;
    v.data = static_cast<char*>(base) + offset * tigon::element_size(t);
    v.dtype = t;
    v.device = d;
    v.ndim = 2;
    v.sizes[0] = rows;
    v.sizes[1] = width;
    v.strides[0] = stride;
    v.strides[1] = 1;
    return v;
  }
};

std::vector<unsigned char> random_bytes(DType t, std::int64_t n, std::mt19937& rng) {
  std::vector<unsigned char> out(n * tigon::element_size(t));
  std::normal_distribution<float> dist(0.0f, 2.5f);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (t == DType::kFloat32) {
      std::memcpy(&out[4 * i], &v, 4);
    } else {
      const std::uint16_t b = t == DType::kFloat16 ? tigon::math::float_to_half_bits(v)
                                                   : tigon::math::float_to_bf16_bits(v);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

// A device copy of `host` with 16 bytes of slack past its end.
DeviceBuffer to_device(const std::vector<unsigned char>& host) {
  return DeviceBuffer(host.data(), host.size(), 16);
}

struct Case {
  GluActivation act;
  DType dtype;
  std::int64_t rows, width;
  std::int64_t pad = 0;     // extra row stride
  std::int64_t offset = 0;  // elements into each buffer (unaligned when not a multiple of 8)
  bool in_place = false;
  bool fused = false;  // a and b are the halves of one gate_up buffer
};

std::string name(const Case& c) {
  return std::string(tigon::glu_activation_name(c.act)) + "_" + tigon::dtype_name(c.dtype) + "_R" +
         std::to_string(c.rows) + "_W" + std::to_string(c.width) + "_pad" + std::to_string(c.pad) +
         "_off" + std::to_string(c.offset) + (c.in_place ? "_inplace" : "") +
         (c.fused ? "_fused" : "");
}

double element(DType t, const std::vector<unsigned char>& bytes, std::size_t i) {
  if (t == DType::kFloat32) {
    float v;
    std::memcpy(&v, &bytes[4 * i], 4);
    return v;
  }
  std::uint16_t b;
  std::memcpy(&b, &bytes[2 * i], 2);
  return t == DType::kFloat16 ? tigon::math::half_bits_to_float(b)
                              : tigon::math::bf16_bits_to_float(b);
}

// GPU vs CPU outputs: each within two roundings of T (float32: 1e-5) relative, or 1e-4 absolute
// where terms cancel (GeGLU's 1 + tanh in the tail, its derivative near its zero at a ~ -0.75,
// where float32 ulps of terms ~10 show), and in 16-bit types at least 97% bitwise equal.
void expect_matches(DType t, const std::vector<unsigned char>& want,
                    const std::vector<unsigned char>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const double rtol = t == DType::kFloat32 ? 1e-5 : (t == DType::kFloat16 ? 1.0 / 512 : 1.0 / 64);
  const std::size_t n = want.size() / tigon::element_size(t);
  std::size_t exact = 0, bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double w = element(t, want, i), g = element(t, got, i);
    const std::size_t es = tigon::element_size(t);
    if (std::memcmp(&want[es * i], &got[es * i], es) == 0) {
      ++exact;
    } else if (!(std::abs(g - w) <= 1e-4 + rtol * std::abs(w))) {
      if (bad++ < 3) ADD_FAILURE() << what << "[" << i << "]: cpu " << w << " gpu " << g;
    }
  }
  EXPECT_EQ(bad, 0u) << what;
  if (t != DType::kFloat32 && n >= 100) {
    EXPECT_GE(static_cast<double>(exact) / n, 0.97) << what << ": bitwise-equal fraction";
  }
}

// Runs fwd and bwd on both backends from the same bytes and compares (expect_matches).
void run_case(const Case& c) {
  SCOPED_TRACE(name(c));
  std::mt19937 rng(static_cast<std::uint32_t>(std::hash<std::string>{}(name(c))));
  const DType t = c.dtype;
  const std::size_t es = tigon::element_size(t);
  const std::int64_t stride = (c.fused ? 2 * c.width : c.width) + c.pad;
  const Layout la{c.rows, c.width, stride, c.offset};
  const Layout lb{c.rows, c.width, stride, c.offset + (c.fused ? c.width : 0)};
  const Layout lo{c.rows, c.width, c.width + c.pad, c.offset};
  const std::int64_t n_in = std::max(la.elements(), lb.elements());
  auto a_host = random_bytes(t, n_in, rng);
  auto b_host = c.fused ? a_host : random_bytes(t, n_in, rng);
  auto dy_host = random_bytes(t, lo.elements(), rng);
  std::vector<unsigned char> y_host(lo.elements() * es), da_host = y_host, db_host = y_host;

  DeviceBuffer a_dev = to_device(a_host), b_dev = to_device(b_host), dy_dev = to_device(dy_host),
               y_dev = to_device(y_host), da_dev = to_device(y_host), db_dev = to_device(y_host);
  const Device cpu = Device::cpu(), gpu = Device::cuda(0);
  void* b_cpu_base = c.fused ? a_host.data() : b_host.data();
  void* b_gpu_base = c.fused ? a_dev.data() : b_dev.data();
  tigon::glu_fwd(c.act, la.view(a_host.data(), t, cpu), lb.view(b_cpu_base, t, cpu),
                 lo.view(y_host.data(), t, cpu));
  tigon::glu_fwd(c.act, la.view(a_dev.data(), t, gpu), lb.view(b_gpu_base, t, gpu),
                 lo.view(y_dev.data(), t, gpu));
  cuda_ok(cudaDeviceSynchronize());
  expect_matches(t, y_host, y_dev.download(y_host.size()), "forward");

  const TensorView da_cpu =
      c.in_place ? la.view(a_host.data(), t, cpu) : lo.view(da_host.data(), t, cpu);
  const TensorView db_cpu =
      c.in_place ? lb.view(b_cpu_base, t, cpu) : lo.view(db_host.data(), t, cpu);
  const TensorView da_gpu =
      c.in_place ? la.view(a_dev.data(), t, gpu) : lo.view(da_dev.data(), t, gpu);
  const TensorView db_gpu =
      c.in_place ? lb.view(b_gpu_base, t, gpu) : lo.view(db_dev.data(), t, gpu);
  tigon::glu_bwd(c.act, lo.view(dy_host.data(), t, cpu), la.view(a_host.data(), t, cpu),
                 lb.view(b_cpu_base, t, cpu), da_cpu, db_cpu);
  tigon::glu_bwd(c.act, lo.view(dy_dev.data(), t, gpu), la.view(a_dev.data(), t, gpu),
                 lb.view(b_gpu_base, t, gpu), da_gpu, db_gpu);
  cuda_ok(cudaDeviceSynchronize());
  if (c.in_place) {
    expect_matches(t, a_host, a_dev.download(a_host.size()), "da (in a)");
    if (!c.fused) expect_matches(t, b_host, b_dev.download(b_host.size()), "db (in b)");
  } else {
    expect_matches(t, da_host, da_dev.download(da_host.size()), "da");
    expect_matches(t, db_host, db_dev.download(db_host.size()), "db");
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto act : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
    for (auto t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (std::int64_t w : {1, 3, 7, 8, 9, 64, 1000, 4096, 4097, 14336})
        out.push_back({act, t, 3, w});
      out.push_back({act, t, 1, 1 << 20});                  // one long row, many tiles
      out.push_back({act, t, 37, 333});                     // dense, odd: collapsed to one row
      out.push_back({act, t, 5, 256, 8});                   // strided rows, aligned
      out.push_back({act, t, 5, 250, 3, 1});                // strided, unaligned: scalar path
      out.push_back({act, t, 4, 129, 0, 3});                // dense, unaligned
      out.push_back({act, t, 6, 512, 0, 0, true});          // in place
      out.push_back({act, t, 9, 1024, 0, 0, false, true});  // gate_up halves
      out.push_back({act, t, 9, 1024, 0, 0, true, true});   // gate_up halves, in place
      out.push_back({act, t, 7, 130, 6, 2, true, true});    // unaligned gate_up, in place
    }
  }
  return out;
}

TEST(GluCuda, MatchesCpuBackend) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Case& c : cases()) run_case(c);
}

TEST(GluCudaEdge, EmptyIsANoOp) {
  SKIP_WITHOUT_CUDA_DEVICE();
  TensorView e = TensorView::contiguous(nullptr, DType::kBFloat16, {0, 16}, Device::cuda(0));
  tigon::swiglu_fwd(e, e, e);
  tigon::geglu_bwd(e, e, e, e, e);
  cuda_ok(cudaDeviceSynchronize());
}

// Two runs of the same call give the same bits (no atomics, no order dependence).
TEST(GluCudaEdge, Deterministic) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t n = 1 << 22;
  std::mt19937 rng(7);
  auto a = random_bytes(DType::kBFloat16, n, rng), b = random_bytes(DType::kBFloat16, n, rng);
  DeviceBuffer ad = to_device(a), bd = to_device(b), y1 = to_device(a), y2 = to_device(a);
  const Device d = Device::cuda(0);
  auto v = [&](void* p) { return TensorView::contiguous(p, DType::kBFloat16, {n}, d); };
  tigon::geglu_fwd(v(ad.data()), v(bd.data()), v(y1.data()));
  tigon::geglu_fwd(v(ad.data()), v(bd.data()), v(y2.data()));
  cuda_ok(cudaDeviceSynchronize());
  EXPECT_EQ(y1.download(2 * n), y2.download(2 * n));
}

// Every 16-bit value of a (bf16: 65536 patterns, fp16 likewise) in each of kRows rows, against b
// and dy that are random in most rows and one special value per row in the others: the
// library's kernels (fast gate, vectorized) and the exact reference kernel give the same bits
// for y, da, db, out of place and in place. h depends on a alone, so this covers the fast gate
// on every input it can see.
constexpr std::int64_t kPatterns = 65536;
constexpr std::int64_t kRows = 256;

std::uint16_t to_bits(DType t, float v) {
  return t == DType::kFloat16 ? tigon::math::float_to_half_bits(v)
                              : tigon::math::float_to_bf16_bits(v);
}

std::vector<std::uint16_t> gate_operand(DType t, std::mt19937& rng, int salt) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f, -0.0f, 1e-40f, -1e-40f, 6e-8f, inf,    -inf,
                                      NAN,  1.0f,  -1.0f,  65504.f, 3e38f, -3e38f, 1e-30f};
  std::vector<std::uint16_t> out(kPatterns * kRows);
  std::normal_distribution<float> dist(0.0f, 2.5f);
  for (std::int64_t r = 0; r < kRows; ++r) {
    const bool is_special = r < static_cast<std::int64_t>(special.size());
    const float sv = is_special ? special[(r + salt) % special.size()] : 0.0f;
    for (std::int64_t i = 0; i < kPatterns; ++i) {
      out[r * kPatterns + i] = to_bits(t, is_special ? sv : dist(rng));
    }
  }
  return out;
}

void expect_bitwise(const std::vector<unsigned char>& want, const std::vector<unsigned char>& got,
                    const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b,
                    const std::vector<std::uint16_t>& dy, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size() / 2; ++i) {
    if (want[2 * i] != got[2 * i] || want[2 * i + 1] != got[2 * i + 1]) {
      if (bad++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: a 0x" << std::hex << a[i] << " b 0x" << b[i]
                      << " dy 0x" << dy[i] << ": exact 0x" << (want[2 * i] | want[2 * i + 1] << 8)
                      << ", kernel 0x" << (got[2 * i] | got[2 * i + 1] << 8) << std::dec;
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements that differ from the exact device math";
}

TEST(GluCudaExact, EveryGateValueMatchesExactDeviceMath) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t n = kPatterns * kRows;
  const Device d = Device::cuda(0);
  for (auto t : {DType::kBFloat16, DType::kFloat16}) {
    std::mt19937 rng(t == DType::kFloat16 ? 11 : 7);
    std::vector<std::uint16_t> a(n);
    for (std::int64_t i = 0; i < n; ++i) a[i] = static_cast<std::uint16_t>(i % kPatterns);
    const auto b = gate_operand(t, rng, 0), dy = gate_operand(t, rng, 5);
    const std::size_t bytes = 2 * n;
    DeviceBuffer ad(a.data(), bytes), bd(b.data(), bytes), dyd(dy.data(), bytes);
    DeviceBuffer y(bytes), y_ref(bytes), da(bytes), da_ref(bytes), db(bytes), db_ref(bytes);
    auto v = [&](const DeviceBuffer& buf) { return TensorView::contiguous(buf.data(), t, {n}, d); };
    for (auto act : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
      SCOPED_TRACE(std::string(tigon::glu_activation_name(act)) + " " + tigon::dtype_name(t));
      tigon::glu_fwd(act, v(ad), v(bd), v(y));
      cuda_ok(cudaDeviceSynchronize());
      tigon::testing::exact_glu_fwd(act, t, ad.data(), bd.data(), y_ref.data(), n);
      expect_bitwise(y_ref.download(bytes), y.download(bytes), a, b, dy, "y");

      tigon::glu_bwd(act, v(dyd), v(ad), v(bd), v(da), v(db));
      cuda_ok(cudaDeviceSynchronize());
      tigon::testing::exact_glu_bwd(act, t, dyd.data(), ad.data(), bd.data(), da_ref.data(),
                                    db_ref.data(), n);
      const auto want_da = da_ref.download(bytes), want_db = db_ref.download(bytes);
      expect_bitwise(want_da, da.download(bytes), a, b, dy, "da");
      expect_bitwise(want_db, db.download(bytes), a, b, dy, "db");

      // In place: da into a copy of a, db into a copy of b.
      DeviceBuffer a2(a.data(), bytes), b2(b.data(), bytes);
      tigon::glu_bwd(act, v(dyd), v(a2), v(b2), v(a2), v(b2));
      cuda_ok(cudaDeviceSynchronize());
      expect_bitwise(want_da, a2.download(bytes), a, b, dy, "da (in place)");
      expect_bitwise(want_db, b2.download(bytes), a, b, dy, "db (in place)");

      // The share of a values that take the exact path (informational).
      const std::int64_t undecided =
          tigon::testing::fast_gate_undecided(act, t, ad.data(), kPatterns);
      std::vector<std::uint16_t> normal(1 << 20);
      std::normal_distribution<float> unit(0.0f, 1.0f);
      for (auto& x : normal) x = to_bits(t, unit(rng));
      DeviceBuffer nd(normal.data(), 2 * normal.size());
      const std::int64_t undecided_normal = tigon::testing::fast_gate_undecided(
          act, t, nd.data(), static_cast<std::int64_t>(normal.size()));
      std::cout << "[ INFO ] " << tigon::glu_activation_name(act) << " " << tigon::dtype_name(t)
                << ": exact-path gates " << undecided << " of 65536 bit patterns, "
                << undecided_normal << " of " << normal.size() << " N(0,1) samples\n";
    }
  }
}

// Gate / down multipliers (include/tigon/ops/glu.h): the scaled kernels equal the plain kernels
// run on the pre-scaled inputs, with the multipliers' roundings done on the host, bit for bit:
// y = round_T(plain_fwd(round_T(a * gm), b) * dm), da = round_T(dz * gm) with dz, db from
// plain_bwd(round_T(dy * dm), round_T(a * gm), b). Vectorized and scalar paths (offset 1), a
// row tail, in place; and multipliers of exactly 1 give the plain kernels' bits.
std::vector<unsigned char> scaled_bytes(DType t, const std::vector<unsigned char>& in, float m) {
  const std::size_t es = tigon::element_size(t);
  const std::size_t n = in.size() / es;
  std::vector<unsigned char> out(in.size());
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(element(t, in, i)) * m;
    if (t == DType::kFloat32) {
      std::memcpy(&out[4 * i], &v, 4);
    } else {
      const std::uint16_t b = to_bits(t, v);
      std::memcpy(&out[2 * i], &b, 2);
    }
  }
  return out;
}

TEST(GluCudaMultipliers, ScaledKernelsComposeThePlainOnes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Device gpu = Device::cuda(0);
  const float kMultipliers[][2] = {
      {0.8927f, 1.0f}, {1.0f, 0.3921875f}, {0.6f, 1.7f}, {-2.5f, -0.1f}, {1.0f, 1.0f}};
  for (const GluActivation act : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
    for (const DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      for (const std::int64_t offset : {0, 1}) {  // vectorized, scalar
        for (const auto& m : kMultipliers) {
          const float gm = m[0], dm = m[1];
          SCOPED_TRACE(std::string(tigon::glu_activation_name(act)) + "_" + tigon::dtype_name(t) +
                       "_off" + std::to_string(offset) + "_gm" + std::to_string(gm) + "_dm" +
                       std::to_string(dm));
          const std::int64_t rows = 3, width = 4099;
          const Layout l{rows, width, width, offset};
          const std::size_t es = tigon::element_size(t);
          const std::int64_t n = l.elements();
          std::mt19937 rng(static_cast<std::uint32_t>(n * 31 + offset));
          auto a = random_bytes(t, n, rng), b = random_bytes(t, n, rng),
               dy = random_bytes(t, n, rng);
          auto z = scaled_bytes(t, a, gm), dc = scaled_bytes(t, dy, dm);
          DeviceBuffer ad = to_device(a), bd = to_device(b), dyd = to_device(dy);
          DeviceBuffer zd = to_device(z), dcd = to_device(dc);
          DeviceBuffer y(n * es + 16), da(n * es + 16), db(n * es + 16);
          DeviceBuffer c(n * es + 16), dz(n * es + 16), db_plain(n * es + 16);
          auto v = [&](const DeviceBuffer& buf) { return l.view(buf.data(), t, gpu); };
          const tigon::GluMultipliers mult{gm, dm};
          tigon::glu_fwd(act, v(ad), v(bd), v(y), mult);
          tigon::glu_bwd(act, v(dyd), v(ad), v(bd), v(da), v(db), mult);
          tigon::glu_fwd(act, v(zd), v(bd), v(c));
          tigon::glu_bwd(act, v(dcd), v(zd), v(bd), v(dz), v(db_plain));
          // In place: da into a copy of a, db into a copy of b.
          DeviceBuffer a2 = to_device(a), b2 = to_device(b);
          tigon::glu_bwd(act, v(dyd), v(a2), v(b2), v(a2), v(b2), mult);
          cuda_ok(cudaDeviceSynchronize());
          const std::size_t bytes = n * es;
          const auto want_y = scaled_bytes(t, c.download(bytes), dm);
          const auto want_da = scaled_bytes(t, dz.download(bytes), gm);
          const auto want_db = db_plain.download(bytes);
          const std::size_t skip = offset * es;  // the bytes before the view: not written
          auto same = [&](const std::vector<unsigned char>& want,
                          const std::vector<unsigned char>& got, const char* what) {
            std::size_t bad = 0;
            for (std::size_t i = skip / es; i < static_cast<std::size_t>(n); ++i) {
              if (std::memcmp(&want[es * i], &got[es * i], es) != 0 && bad++ < 3) {
                ADD_FAILURE() << what << "[" << i << "]: want " << element(t, want, i) << " got "
                              << element(t, got, i);
              }
            }
            EXPECT_EQ(bad, 0u) << what;
          };
          same(want_y, y.download(bytes), "y");
          same(want_da, da.download(bytes), "da");
          same(want_db, db.download(bytes), "db");
          same(want_da, a2.download(bytes), "da in place");
          same(want_db, b2.download(bytes), "db in place");
        }
      }
    }
  }
}

// More than 2^31 elements (bf16): the last elements, past the 32-bit index range, are computed.
TEST(GluCudaHuge, MoreThan2To31Elements) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::int64_t width = 14336;
  const std::int64_t rows = (std::int64_t{1} << 31) / width + 4;
  const std::int64_t n = rows * width;
  std::size_t free_bytes = 0, total = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total));
  if (free_bytes < static_cast<std::size_t>(3 * n * 2) + (std::size_t{1} << 30))
    GTEST_SKIP() << "needs ~14 GB of free device memory";
  void *a, *b, *y;
  cuda_ok(cudaMalloc(&a, n * 2));
  cuda_ok(cudaMalloc(&b, n * 2));
  cuda_ok(cudaMalloc(&y, n * 2));
  cuda_ok(cudaMemset(a, 0x3f, n * 2));  // 0x3f3f: bf16 0.746
  cuda_ok(cudaMemset(b, 0x40, n * 2));  // 0x4040: bf16 3.0
  cuda_ok(cudaMemset(y, 0, n * 2));
  const Device d = Device::cuda(0);
  const auto va = TensorView::contiguous(a, DType::kBFloat16, {rows, width}, d);
  const auto vb = TensorView::contiguous(b, DType::kBFloat16, {rows, width}, d);
  const auto vy = TensorView::contiguous(y, DType::kBFloat16, {rows, width}, d);
  tigon::swiglu_fwd(va, vb, vy);
  tigon::swiglu_bwd(vy, va, vb, va, vb);  // in place, dy = y
  cuda_ok(cudaDeviceSynchronize());
  // Every element is the same computation: compare the first and the last few with the CPU.
  using Math = tigon::math::Glu<GluActivation::kSilu, tigon::math::BFloat16>;
  const auto want_y = Math::forward(tigon::math::bf16_bits_to_float(0x3f3f),
                                    tigon::math::bf16_bits_to_float(0x4040));
  const auto want =
      Math::backward(tigon::math::to_float(want_y), tigon::math::bf16_bits_to_float(0x3f3f),
                     tigon::math::bf16_bits_to_float(0x4040));
  for (std::int64_t i : {std::int64_t{0}, (std::int64_t{1} << 31) + 5, n - 1}) {
    std::uint16_t got_y, got_a, got_b;
    cuda_ok(cudaMemcpy(&got_y, static_cast<char*>(y) + 2 * i, 2, cudaMemcpyDeviceToHost));
    cuda_ok(cudaMemcpy(&got_a, static_cast<char*>(a) + 2 * i, 2, cudaMemcpyDeviceToHost));
    cuda_ok(cudaMemcpy(&got_b, static_cast<char*>(b) + 2 * i, 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_y, want_y.bits) << i;
    EXPECT_EQ(got_a, want.da.bits) << i;
    EXPECT_EQ(got_b, want.db.bits) << i;
  }
  cuda_ok(cudaFree(a));
  cuda_ok(cudaFree(b));
  cuda_ok(cudaFree(y));
}

}  // namespace
