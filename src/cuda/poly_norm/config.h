// PolyNorm on CUDA: how a row is spread over threads (a function of the row length only, so the
// row sums' order, hence every bit, is the same on every GPU and for every launch config) and the
// launch choices: 16-byte packs or one element at a time, and whether a thread keeps its chunks
// of the row in registers between the row sums and the output or reads them again.
#pragma once

#include <algorithm>
#include <cstdint>

#include "math/host_device.h"
#include "ops/poly_norm_args.h"

namespace tigon::cuda::poly_norm {

inline constexpr int kChunkColumns = 8;    // consecutive columns of a chunk (row_chunk.cuh)
inline constexpr int kResidentChunks = 4;  // chunks a thread keeps in registers
inline constexpr int kMinRowThreads = 32;
// The kernels' launch bound: 128 registers a thread, room for 4 resident chunks of x and dy as
// float32 (at 1024 threads, 64 registers, the backward spilled 300-600 bytes).
inline constexpr int kMaxRowThreads = 512;
inline constexpr int kMinBlockThreads = 128;  // short rows share a CTA up to this many threads

// Thread t of a row owns chunks t, t + row_threads, ... (chunk c: columns [8c, 8c + 8)) and adds
// its terms in that order, element by element; then the row's threads' sums meet in
// row_group_sums's fixed order. row_threads: the smallest power of two from 32 to 512 that lets
// each thread own at most kResidentChunks chunks.
struct RowSplit {
  int row_threads = kMinRowThreads;
  int block_threads = kMinBlockThreads;
  std::int64_t chunks = 0;
  TIGON_HD int rows_per_block() const { return block_threads / row_threads; }
  // Chunks per thread (the longest thread's).
  TIGON_HD std::int64_t thread_chunks() const { return (chunks + row_threads - 1) / row_threads; }
};

inline RowSplit row_split(std::int64_t hidden) {
  RowSplit s;
  s.chunks = (hidden + kChunkColumns - 1) / kChunkColumns;
  int t = kMinRowThreads;
  while (t < kMaxRowThreads && static_cast<std::int64_t>(t) * kResidentChunks < s.chunks) t *= 2;
  s.row_threads = t;
  s.block_threads = std::max(t, kMinBlockThreads);
  return s;
}

// The launch config (config_for in poly_norm.cu): vector where every pointer and stride allows;
// resident where each thread's chunks fit kResidentChunks (rows up to 16384 elements).
struct Config {
  bool vector = false;
  bool resident = true;
};

// The forward / backward with the config poly_norm.cu picks (forced null) or with *forced
// (tests run every config on the same inputs; a forced config must be one the inputs allow).
void fwd_with_config(const detail::PolyNormFwdArgs& a, const Config* forced, int device,
                     void* stream);
void bwd_with_config(const detail::PolyNormBwdArgs& a, const Config* forced, int device,
                     void* stream);

}  // namespace tigon::cuda::poly_norm
