// Umbrella header: the whole public C++ API of tigon.
#pragma once

#include "tigon/backends.h"
#include "tigon/dtype.h"
#include "tigon/error.h"
#include "tigon/ops/cross_entropy.h"
#include "tigon/ops/divergence.h"
#include "tigon/ops/dyt.h"
#include "tigon/ops/fused_add_rms_norm.h"
#include "tigon/ops/fused_linear_cross_entropy.h"
#include "tigon/ops/gated_rms_norm.h"
#include "tigon/ops/glu.h"
#include "tigon/ops/layer_norm.h"
#include "tigon/ops/moe_experts.h"
#include "tigon/ops/poly_norm.h"
#include "tigon/ops/rms_norm.h"
#include "tigon/ops/rope.h"
#include "tigon/tensor.h"
