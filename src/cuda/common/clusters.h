// Whether kernels of this library may use sm_90 launch features (thread-block clusters,
// programmatic dependent launch) on a device.
#pragma once

namespace tigon::cuda {

// True when `device` is sm_90 or newer AND runs code of this library built for sm_90 or newer
// (not older PTX JIT-compiled for it): then cluster launches and distributed shared memory work.
// Asked of the runtime once per device.
bool clusters_available(int device);

// Programmatic dependent launch (launch_dependent_kernel) needs the same: code built for sm_90 or
// newer running on such a device (older code compiles wait_for_prior_grid away).
inline bool dependent_launch_available(int device) { return clusters_available(device); }

}  // namespace tigon::cuda
