// Whether kernels of this library may run as thread-block clusters on a device.
#pragma once

namespace tigon::cuda {

// True when `device` is sm_90 or newer AND runs code of this library built for sm_90 or newer
// (not older PTX JIT-compiled for it): then cluster launches and distributed shared memory work.
// Asked of the runtime once per device.
bool clusters_available(int device);

}  // namespace tigon::cuda
