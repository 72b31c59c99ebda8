// SPDX-License-Identifier: Apache-2.0
// The device allocator's memory history, as torch.cuda.memory._record_memory_history keeps it
// for CUDA: every allocation and free of device memory with the stack that made it, in a
// bounded list per device, and the stack of every live block, for _snapshot()
// (csrc/python/MemorySnapshot.cpp). Off by default; while off, the allocator pays one relaxed
// atomic load per allocation and free.
#pragma once

#include <c10/core/Allocator.h> // c10::GatheredContext
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace torch_hal
{

// What _record_memory_history(enabled, context, stacks, max_entries) asks for.
struct MemoryHistorySettings {
    bool enabled = false;         // enabled: "state" or "all"
    bool record_trace = false;    // enabled == "all": keep the list of actions
    bool stacks_of_state = false; // context in ("state", "alloc", "all"): live blocks' stacks
    bool stacks_of_alloc = false; // context in ("alloc", "all"): on the "alloc" entries too
    bool stacks_of_free = false;  // context == "all": on the "free_*" entries too
    bool cpp_frames = false;      // stacks == "all" (else Python and TorchScript frames only)
    size_t max_entries = SIZE_MAX;
};

// An action of the list (the keys of torch.cuda.memory._snapshot()'s device_traces).
struct MemoryTraceEntry {
    // "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"
    const char *action;
    uintptr_t address; // "oom": the device's free bytes, as torch.cuda keeps them
    size_t size;       // bytes asked for
    uintptr_t stream;  // the hal_stream_t it was allocated for
    int64_t time_us;   // wall clock, microseconds since the epoch
    std::shared_ptr<c10::GatheredContext> context; // the stack, or null
};

// Starts, changes or (enabled == false) stops the recording; stopping drops the list and the
// stacks. Thread safety: safe.
void setMemoryHistory(const MemoryHistorySettings &settings);

// Whether anything records (one relaxed atomic load). Thread safety: safe.
bool memoryHistoryRecording() noexcept;

// Records an allocation of `size` bytes at `address` on device `index` for `stream` (a
// hal_stream_t), / its free (the stream is the allocation's). Call only while
// memoryHistoryRecording(). Thread safety: safe.
void recordMemoryAllocation(c10::DeviceIndex index, void *address, size_t size, uintptr_t stream);
void recordMemoryFree(c10::DeviceIndex index, void *address, size_t size);

// A segment of the device allocator: its address, size and stream (a hal_stream_t).
struct MemorySegment {
    uintptr_t address;
    size_t size;
    uintptr_t stream;
};

// The stack of the allocation that made the allocator map the segment at `address` of device
// `index` while recording, or null. Thread safety: safe.
std::shared_ptr<c10::GatheredContext> memorySegmentContext(c10::DeviceIndex index,
                                                           uintptr_t address);

// The device allocator's segments of device `index` now: records a "segment_alloc" for each
// segment that appeared since the last call (its stack is that of the allocation recorded next
// inside it) and a "segment_free" for each that went; with note_only, only notes them (when the
// recording starts). Call only while
// memoryHistoryRecording(). Thread safety: safe.
void recordMemorySegments(c10::DeviceIndex index, const std::vector<MemorySegment> &segments,
                          bool note_only = false);

// Records that an allocation of `size` bytes for `stream` failed with `device_free` bytes free
// on the device ("oom"). Call only while memoryHistoryRecording(). Thread safety: safe.
void recordMemoryOom(c10::DeviceIndex index, size_t size, size_t device_free, uintptr_t stream);

// The list of device `index`, oldest first (empty when not recording everything).
std::vector<MemoryTraceEntry> memoryTrace(c10::DeviceIndex index);

// The stack recorded for the live block at `address`, or null.
std::shared_ptr<c10::GatheredContext> memoryBlockContext(void *address);

} // namespace torch_hal
