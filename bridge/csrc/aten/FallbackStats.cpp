// SPDX-License-Identifier: Apache-2.0
// The fallback's counters (FallbackStats.h) and their readers (Common.h).
#include "aten/FallbackStats.h"

#include <initializer_list>

#include "aten/Common.h"

namespace torch_hal
{

FallbackCounters g_fallback_counters;

FallbackStats fallbackStats()
{
    const FallbackCounters &c = g_fallback_counters;
    return FallbackStats{ c.calls.load(),           c.in_place_calls.load(),
                          c.staged_calls.load(),    c.outputs_adopted.load(),
                          c.outputs_aliased.load(), c.outputs_copied.load(),
                          c.bytes_staged_in.load(), c.bytes_staged_out.load() };
}

void countHostResultBytes(uint64_t bytes)
{
    g_fallback_counters.bytes_staged_out += bytes;
}

void resetFallbackStats()
{
    FallbackCounters &c = g_fallback_counters;
    for (std::atomic<uint64_t> *counter :
         { &c.calls, &c.in_place_calls, &c.staged_calls, &c.outputs_adopted, &c.outputs_aliased,
           &c.outputs_copied, &c.bytes_staged_in, &c.bytes_staged_out })
        counter->store(0);
}

} // namespace torch_hal
