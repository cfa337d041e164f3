// The staged RMSNorm kernels' shared-memory ring (sm_90): `stages` slots, each holding every
// thread's K 16-byte packs of one row block, filled by bulk copies (TMA) while the threads compute
// on an earlier slot.
//
// Thread t's pack k of slot s sits at element ((s * K + k) * blockDim.x + t) * P. The threads of a
// row slot (threads [slot * group, (slot + 1) * group)) own packs k * group + lane of their slice
// of the row, so for each k those packs are contiguous in global memory and in the slot: the row
// slot's lane 0 fills them with one bulk copy per k, and each thread reads back its own packs
// (a warp's reads of one k are contiguous: no bank conflicts). Each slot has an mbarrier that the
// bulk copies count their bytes into; it completes once the leader of every row slot of the block
// has arrived (with the bytes it announced: none for a row past the end) and the bytes have landed.
//
// Why not cp.async (LDGSTS), 16 bytes a thread, as this ring first did: both staged kernels were
// then slower than the register kernels on an H100 and an H200 at every depth; a bulk copy is one
// instruction a row slot and k, and needs no registers or commit groups.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/thread_share.cuh"

namespace tigon::cuda::rms_norm {

inline constexpr int kMaxStages = 8;  // Tuning::fwd_stages and bwd_stages

// One mbarrier a slot, and the parity of each one's current phase.
struct RingBarriers {
  alignas(8) std::uint64_t landed[kMaxStages];
};

class RingPhases {
 public:
  // Thread 0 sets up the first `stages` barriers for `arrivals` row-slot leaders each; the caller
  // then needs a block barrier before any use.
  __device__ RingPhases(RingBarriers& barriers, int stages, int arrivals) : barriers_(barriers) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < stages; ++s) mbarrier_init(&barriers.landed[s], arrivals);
      mbarrier_init_fence();
    }
  }
  __device__ unsigned barrier(int stage) const { return shared_address(&barriers_.landed[stage]); }
  // Waits for slot `stage`'s current fill. Every thread of the block waits on every fill, in order.
  __device__ void wait(int stage) {
    mbarrier_wait(barrier(stage), (phases_ >> stage) & 1u);
    phases_ ^= 1u << stage;
  }

 private:
  RingBarriers& barriers_;
  unsigned phases_ = 0;
};

template <typename T, int P, int K>
struct PackRing {
  static constexpr int kPackBytes = static_cast<int>(sizeof(T)) * P;
  static_assert(kPackBytes == 16, "bulk copies of 16-byte packs");

  T* base;

  static constexpr std::size_t bytes(int stages, int threads) {
    return static_cast<std::size_t>(stages) * K * threads * kPackBytes;
  }

  __device__ __forceinline__ T* at(int stage, int k, int thread) const {
    return base +
           static_cast<std::ptrdiff_t>((stage * K + k) * static_cast<int>(blockDim.x) + thread) * P;
  }
  __device__ __forceinline__ T* at(int stage, int k) const {
    return at(stage, k, static_cast<int>(threadIdx.x));
  }

  // Bytes one row slot's fill copies: packs k * group + lane of the slice, k < K, lane < group.
  __device__ __forceinline__ static unsigned slot_bytes(const ThreadShare& t) {
    unsigned packs = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) packs += slot_packs(t, k);
    return packs * kPackBytes;
  }

  // The row slot's leader (lane 0) starts copying its slice of one row (`slice`: its pack 0) into
  // slot `stage`, counted into `barrier`; the leader announces the bytes (slot_bytes) itself. It
  // calls this after the block barrier that follows every thread's reads of the slot's last fill.
  __device__ __forceinline__ void fill(int stage, const T* slice, const ThreadShare& t,
                                       unsigned barrier) const {
    const int leader = static_cast<int>(threadIdx.x);
    fence_proxy_async_shared();  // those reads before these copies' writes
    if (t.rows_in_block == 1) {
      // One row a block: the slot is the slice in its own order, one copy.
      if (t.slice_packs > 0) {
        bulk_copy_to_shared(at(stage, 0, leader), slice,
                            static_cast<unsigned>(t.slice_packs) * kPackBytes, barrier);
      }
      return;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const unsigned packs = slot_packs(t, k);
      if (packs > 0) {
        bulk_copy_to_shared(at(stage, k, leader), slice + k * t.group * P, packs * kPackBytes,
                            barrier);
      }
    }
  }

  __device__ __forceinline__ Pack<T, P> read(int stage, int k) const {
    return load_pack<T, P>(at(stage, k));
  }

 private:
  // Packs k * group .. k * group + group - 1 of the slice that exist.
  __device__ __forceinline__ static unsigned slot_packs(const ThreadShare& t, int k) {
    const int left = t.slice_packs - k * t.group;
    return static_cast<unsigned>(left <= 0 ? 0 : left < t.group ? left : t.group);
  }
};

}  // namespace tigon::cuda::rms_norm
