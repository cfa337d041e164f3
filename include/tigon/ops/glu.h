// Gated linear units: SwiGLU y = silu(a) * b and GeGLU y = gelu_tanh(a) * b, elementwise.
//
// a is the gate projection, b the up projection (HF: down(act(gate(x)) * up(x))). The results are
// those of Hugging Face's eager MLP and of PyTorch autograd through it, in the tensors' dtype T
// (float32, float16 or bfloat16). round_T = round to nearest even to T; every operation not marked
// round_T is one correctly rounded float32 operation, in the order written (on the CUDA backend
// with nvcc's FMA contraction, as PyTorch's CUDA kernels).
//
// Forward (HF: act_fn(gate) rounds to T, then the product in T rounds again):
//     h = round_T(act(a))
//     y = round_T(h * b)
// silu(a)      = a / (1 + exp(-a))                                     (torch.nn.functional.silu)
// gelu_tanh(a) = (0.5 * a) * (1 + tanh(kBeta * (a + kKappa * ((a * a) * a))))
//                kBeta = float32(sqrt(2 / pi)) = 0.7978846f, kKappa = 0.044715f
//                                                 (torch.nn.functional.gelu(approximate="tanh"))
// exp and tanh: CUDA's expf/tanhf on the CUDA backend (bitwise equal to HF on the GPU), tigon's
// own float32 implementations on the CPU (src/math/activations.h, docs/ops/glu.md).
//
// Backward, given dy = dL/dy (PyTorch autograd through HF eager: the product's backward forms
// dL/dh = round_T(dy * b) and dL/db = round_T(dy * h) with the ROUNDED h; the activation's backward
// then runs in float32 from the T-rounded dL/dh):
//     g  = round_T(dy * b)
//     db = round_T(dy * h)                       h recomputed from a exactly as in the forward
//     da = round_T(act_grad(g, a))
// silu:      s = 1 / (1 + exp(-a));  act_grad = (g * s) * (1 + a * (1 - s))
// gelu_tanh: t = tanh(kBeta * (a + kKappa * (a * (a * a))))
//            act_grad = g * ((0.5 * (1 + t)) + (((0.5 * a) * (1 - t * t)) *
//                                                (kBeta * (1 + (3 * kKappa) * (a * a)))))
//            (3 * kKappa rounded to float32 once)
// Nothing but a and b is saved: the backward recomputes the activation.
//
// Multipliers (GluMultipliers; Falcon-H1's config.mlp_multipliers = [gate, down]). HF's
// FalconH1MLP computes up(x) * act_fn(gate(x) * gate_multiplier), a T tensor times a Python float:
// PyTorch rounds the scalar to float32, multiplies in float32 and rounds to T. With gm =
// float32(gate), dm = float32(down):
//     z  = round_T(a * gm)                       the activation's input, a tensor of T
//     h  = round_T(act(z))
//     c  = round_T(h * b)
//     y  = round_T(c * dm)                       the peer's (Liger's) down_multiplier: on the GLU
//                                                output (HF scales down_proj's output instead:
//                                                tigon.nn's modules do that, not this op)
// Backward (autograd through the same graph; a multiplication by a scalar is its own backward):
//     dc = round_T(dy * dm)
//     g  = round_T(dc * b)
//     db = round_T(dc * h)
//     dz = round_T(act_grad(g, z))
//     da = round_T(dz * gm)
// gm = dm = 1 is the plain op bit for bit (each extra step is exact there); the backends skip
// those steps when gm == 1 and dm == 1. Both must be finite (and finite as float32).
//
// Shapes: a, b, y, dy, da, db all have the same sizes [..., N] (any number of leading dimensions,
// R = their product rows; N >= 1 any size). Each tensor needs unit stride in its last dimension
// and leading dimensions that collapse to one row stride of its own (contiguous tensors, or
// row-strided views: gate, up = gate_up.chunk(2, dim=-1) are read and written without a copy).
// Indexing is 64-bit: any number of elements. 16-byte vector accesses are used when every pointer
// and row stride allows, a scalar path otherwise; results are bitwise identical either way and run
// to run.
//
// In place: da may be a itself and db may be b itself (same data pointer and row stride; this is
// how the backward saves the two gradient buffers). Any other overlap between an output and any
// tensor is not allowed. The ops need no workspace and never allocate or synchronize.
#pragma once

#include "tigon/tensor.h"

namespace tigon {

enum class GluActivation { kSilu, kGeluTanh };

// Scalar multipliers of the gate input and of the output (see above); rounded to float32 once.
struct GluMultipliers {
  double gate = 1.0;  // gate_multiplier: z = round_T(a * gate)
  double down = 1.0;  // down_multiplier: y = round_T(round_T(h * b) * down)
};

const char* glu_activation_name(GluActivation activation) noexcept;

// y = round_T(round_T(silu(a)) * b).
void swiglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y, Stream stream = {});

// da, db from dy (see above). da may be a, db may be b (in place).
void swiglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b,
                const TensorView& da, const TensorView& db, Stream stream = {});

// y = round_T(round_T(gelu_tanh(a)) * b).
void geglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y, Stream stream = {});

void geglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b, const TensorView& da,
               const TensorView& db, Stream stream = {});

// The same ops with the activation chosen at run time.
void glu_fwd(GluActivation activation, const TensorView& a, const TensorView& b,
             const TensorView& y, Stream stream = {});
void glu_bwd(GluActivation activation, const TensorView& dy, const TensorView& a,
             const TensorView& b, const TensorView& da, const TensorView& db, Stream stream = {});

// With gate / down multipliers (see above); GluMultipliers{} gives the ops above.
void swiglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y,
                const GluMultipliers& multipliers, Stream stream = {});
void swiglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b,
                const TensorView& da, const TensorView& db, const GluMultipliers& multipliers,
                Stream stream = {});
void geglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y,
               const GluMultipliers& multipliers, Stream stream = {});
void geglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b, const TensorView& da,
               const TensorView& db, const GluMultipliers& multipliers, Stream stream = {});
void glu_fwd(GluActivation activation, const TensorView& a, const TensorView& b,
             const TensorView& y, const GluMultipliers& multipliers, Stream stream = {});
void glu_bwd(GluActivation activation, const TensorView& dy, const TensorView& a,
             const TensorView& b, const TensorView& da, const TensorView& db,
             const GluMultipliers& multipliers, Stream stream = {});

}  // namespace tigon
