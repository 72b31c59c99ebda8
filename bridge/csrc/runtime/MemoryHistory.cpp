// SPDX-License-Identifier: Apache-2.0
#include "runtime/MemoryHistory.h"

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace torch_hal
{
namespace
{

std::atomic<bool> g_recording{ false };
std::mutex g_mutex;
MemoryHistorySettings g_settings;                                            // guarded by g_mutex
std::unordered_map<c10::DeviceIndex, std::deque<MemoryTraceEntry>> g_traces; // g_mutex
// The live blocks allocated while recording: their stream and (stacks_of_state) stack.
struct LiveBlock {
    uintptr_t stream;
    std::shared_ptr<c10::GatheredContext> context;
};
std::unordered_map<uintptr_t, LiveBlock> g_live; // guarded by g_mutex
// The allocator's segments per device, as last seen while recording, by address, with the
// stack of the allocation that mapped them (`fresh`: mapped, that allocation not yet recorded).
struct KnownSegment {
    MemorySegment segment;
    bool fresh = false;
    std::shared_ptr<c10::GatheredContext> context;
};
std::unordered_map<c10::DeviceIndex, std::map<uintptr_t, KnownSegment>> g_segments; // g_mutex

// The segment of device `index` that holds `address`, or null. Caller holds g_mutex.
KnownSegment *segmentHolding(c10::DeviceIndex index, uintptr_t address)
{
    auto segments = g_segments.find(index);
    if (segments == g_segments.end())
        return nullptr;
    auto it = segments->second.upper_bound(address);
    if (it == segments->second.begin())
        return nullptr;
    --it;
    KnownSegment &s = it->second;
    return address < s.segment.address + s.segment.size ? &s : nullptr;
}

int64_t nowMicroseconds()
{
    using namespace std::chrono;
    return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<c10::GatheredContext> gatherStack(bool cpp)
{
    // Python frames (the GIL is taken by the gatherer) and TorchScript's; C++ ones on request.
    return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true, cpp);
}

void append(c10::DeviceIndex index, MemoryTraceEntry entry)
{
    auto &trace = g_traces[index];
    trace.push_back(std::move(entry));
    while (trace.size() > g_settings.max_entries)
        trace.pop_front();
}

} // namespace

void setMemoryHistory(const MemoryHistorySettings &settings)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    g_settings = settings;
    if (!settings.enabled || !settings.record_trace)
        g_traces.clear();
    if (!settings.enabled) {
        g_live.clear();
        g_segments.clear();
    } else if (!settings.stacks_of_state)
        for (auto &[address, block] : g_live) {
            (void)address;
            block.context = nullptr;
        }
    for (auto &[index, trace] : g_traces) {
        (void)index;
        while (trace.size() > settings.max_entries)
            trace.pop_front();
    }
    g_recording.store(settings.enabled, std::memory_order_relaxed);
}

bool memoryHistoryRecording() noexcept
{
    return g_recording.load(std::memory_order_relaxed);
}

void recordMemoryAllocation(c10::DeviceIndex index, void *address, size_t size, uintptr_t stream)
{
    bool stacks, trace;
    bool cpp;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        stacks = g_settings.enabled && (g_settings.stacks_of_state || g_settings.stacks_of_alloc);
        trace = g_settings.enabled && g_settings.record_trace;
        cpp = g_settings.cpp_frames;
    }
    // Gathered without the lock: the Python gatherer takes the GIL.
    std::shared_ptr<c10::GatheredContext> context = stacks ? gatherStack(cpp) : nullptr;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_settings.enabled)
        return;
    g_live[reinterpret_cast<uintptr_t>(address)] = { stream, g_settings.stacks_of_state ? context
                                                                                        : nullptr };
    // The first allocation in a segment just mapped is the one that mapped it: its stack.
    if (KnownSegment *segment = segmentHolding(index, reinterpret_cast<uintptr_t>(address));
        segment != nullptr && segment->fresh) {
        segment->fresh = false;
        segment->context = context;
        auto trace = g_traces.find(index);
        if (trace != g_traces.end() && g_settings.stacks_of_alloc)
            for (auto e = trace->second.rbegin(); e != trace->second.rend(); ++e)
                if (std::strcmp(e->action, "segment_alloc") == 0 &&
                    e->address == segment->segment.address) {
                    e->context = context;
                    break;
                }
    }
    if (g_settings.record_trace && trace)
        append(index, { "alloc", reinterpret_cast<uintptr_t>(address), size, stream,
                        nowMicroseconds(), g_settings.stacks_of_alloc ? context : nullptr });
}

void recordMemoryFree(c10::DeviceIndex index, void *address, size_t size)
{
    bool stacks, trace, cpp;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        trace = g_settings.enabled && g_settings.record_trace;
        stacks = trace && g_settings.stacks_of_free;
        cpp = g_settings.cpp_frames;
    }
    std::shared_ptr<c10::GatheredContext> context = stacks ? gatherStack(cpp) : nullptr;
    auto at = reinterpret_cast<uintptr_t>(address);
    std::lock_guard<std::mutex> lock(g_mutex);
    auto live = g_live.find(at);
    uintptr_t stream = 0; // unknown: allocated before the recording started
    if (live != g_live.end()) {
        stream = live->second.stream;
        g_live.erase(live);
    }
    if (!g_settings.enabled || !g_settings.record_trace || !trace)
        return;
    int64_t now = nowMicroseconds();
    // The HAL's allocator can reuse a block on its own stream at once (blocks recorded on other
    // streams are held back inside it): the free is requested and completed together.
    append(index, { "free_requested", at, size, stream, now, context });
    append(index, { "free_completed", at, size, stream, now, context });
}

void recordMemorySegments(c10::DeviceIndex index, const std::vector<MemorySegment> &segments,
                          bool note_only)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_settings.enabled)
        return;
    std::map<uintptr_t, KnownSegment> &known = g_segments[index];
    auto same = [](const std::map<uintptr_t, KnownSegment> &set, const MemorySegment &s) {
        auto it = set.find(s.address);
        return it != set.end() && it->second.segment.size == s.size;
    };
    std::map<uintptr_t, KnownSegment> now;
    for (const MemorySegment &s : segments)
        now[s.address] = same(known, s) ? known[s.address] // keeps its stack
                                        : KnownSegment{ s, !note_only, nullptr };
    if (!note_only && g_settings.record_trace) {
        const int64_t at = nowMicroseconds();
        for (const auto &[address, k] : known)
            if (!same(now, k.segment))
                append(index,
                       { "segment_free", address, k.segment.size, k.segment.stream, at, nullptr });
        for (const auto &[address, k] : now)
            if (!same(known, k.segment))
                append(index,
                       { "segment_alloc", address, k.segment.size, k.segment.stream, at, nullptr });
    }
    known = std::move(now);
}

void recordMemoryOom(c10::DeviceIndex index, size_t size, size_t device_free, uintptr_t stream)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_settings.enabled && g_settings.record_trace)
        append(index, { "oom", device_free, size, stream, nowMicroseconds(), nullptr });
}

std::vector<MemoryTraceEntry> memoryTrace(c10::DeviceIndex index)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_traces.find(index);
    if (it == g_traces.end())
        return {};
    return { it->second.begin(), it->second.end() };
}

std::shared_ptr<c10::GatheredContext> memorySegmentContext(c10::DeviceIndex index,
                                                           uintptr_t address)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    KnownSegment *segment = segmentHolding(index, address);
    return segment != nullptr && segment->segment.address == address ? segment->context : nullptr;
}

std::shared_ptr<c10::GatheredContext> memoryBlockContext(void *address)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_live.find(reinterpret_cast<uintptr_t>(address));
    return it == g_live.end() ? nullptr : it->second.context;
}

} // namespace torch_hal
