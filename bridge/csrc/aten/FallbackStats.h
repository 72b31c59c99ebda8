// SPDX-License-Identifier: Apache-2.0
// The counters behind torch_hal._C._fallback_stats(): what the fallback did, and the bytes that
// native kernels computing on the host copy to a device that stages (Common.h's FallbackStats,
// fallbackStats(), resetFallbackStats() and countHostResultBytes() read and write them).
#pragma once

#include <atomic>
#include <cstdint>

namespace torch_hal
{

struct FallbackCounters {
    std::atomic<uint64_t> calls{ 0 }, in_place_calls{ 0 }, staged_calls{ 0 }, outputs_adopted{ 0 },
        outputs_aliased{ 0 }, outputs_copied{ 0 }, bytes_staged_in{ 0 }, bytes_staged_out{ 0 };
};

// The process's counters (constant-initialised, so usable from any static initialiser).
// Thread safety: safe; each counter is atomic, the set is not read as one snapshot.
extern FallbackCounters g_fallback_counters;

} // namespace torch_hal
