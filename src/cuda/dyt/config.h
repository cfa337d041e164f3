// DyT on CUDA: how rows and columns are spread over CTAs (a function of the shape only, so the
// parameter gradients' summation order, hence their bits, is the same on every GPU and for every
// launch config) and the one launch choice, 16-byte packs or one element at a time.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/dyt_args.h"

namespace tigon::cuda::dyt {

inline constexpr int kThreads = 128;
inline constexpr int kChunkColumns = 8;  // consecutive columns a thread owns (row_chunk.cuh)
inline constexpr std::int64_t kTileColumns = kThreads * kChunkColumns;
inline constexpr int kRowBatch = 4;  // rows whose loads a thread issues before computing
// Whole waves of a 132-SM GPU, 16 CTAs an SM (a constant: the same bits on every GPU).
inline constexpr std::int64_t kTargetCtas = 132 * 16;
// The forward has no partials: short row groups. The backward writes a float32 dgamma (and dbeta)
// partial row per group: at least 32 rows a group keep that traffic within about 4% of the data.
inline constexpr std::int64_t kFwdMinGroupRows = 4;
inline constexpr std::int64_t kBwdMinGroupRows = 32;

// CTA b works on column tile b % tiles of the rows [group * group_rows, ...), group = b / tiles.
struct Grid {
  std::int64_t tiles = 1;
  std::int64_t groups = 1;
  std::int64_t group_rows = 1;
  std::int64_t ctas() const { return tiles * groups; }
};

inline Grid grid_for(std::int64_t rows, std::int64_t hidden, std::int64_t min_group_rows) {
  Grid g;
  g.tiles = (hidden + kTileColumns - 1) / kTileColumns;
  const std::int64_t wanted = std::max<std::int64_t>(1, (kTargetCtas + g.tiles - 1) / g.tiles);
  const std::int64_t most = std::max<std::int64_t>(1, rows / min_group_rows);
  const std::int64_t groups = std::max<std::int64_t>(1, std::min(wanted, most));
  g.group_rows = std::max<std::int64_t>(1, (rows + groups - 1) / groups);
  g.groups = std::max<std::int64_t>(1, (rows + g.group_rows - 1) / g.group_rows);
  return g;
}

inline Grid fwd_grid(std::int64_t rows, std::int64_t hidden) {
  return grid_for(rows, hidden, kFwdMinGroupRows);
}
inline Grid bwd_grid(std::int64_t rows, std::int64_t hidden) {
  return grid_for(rows, hidden, kBwdMinGroupRows);
}

// The launch config: 16-byte packs where every pointer and stride allows (config_for in dyt.cu),
// else one element at a time. Both give the same bits.
struct Config {
  bool vector = false;
};

// The forward / backward with the config dyt.cu picks (forced null) or with *forced (tests run
// every config on the same inputs; a forced vector config needs inputs that allow it).
void fwd_with_config(const detail::DytFwdArgs& a, const Config* forced, int device, void* stream);
void bwd_with_config(const detail::DytBwdArgs& a, const Config* forced, int device, void* stream);

}  // namespace tigon::cuda::dyt
