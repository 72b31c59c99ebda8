// SPDX-License-Identifier: Apache-2.0
// torch.<device>.memory._record_memory_history() and _snapshot(): the history of the device
// allocator (runtime/MemoryHistory.h) and the HAL allocator's blocks (hal_allocator_snapshot),
// as the dict torch.cuda.memory._snapshot() returns for CUDA, so that
// torch.cuda._memory_viz and pytorch.org/memory_viz draw the device's memory.
#include "python/MemorySnapshot.h"

#include <pybind11/stl.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/Allocator.h"
#include "runtime/MemoryHistory.h"
#include "runtime/Runtime.h"

namespace py = pybind11;

// Declared as torch/csrc/profiler/python/combined_traceback.h declares them: that header
// includes nlohmann/json.hpp, which the wheel does not ship.
namespace torch
{
TORCH_API std::vector<pybind11::object>
py_symbolize(std::vector<CapturedTraceback *> &to_symbolize);
TORCH_PYTHON_API void installCapturedTracebackPython();
} // namespace torch

namespace torch_hal
{
namespace
{

const char *blockStateName(hal_allocator_block_state_t state)
{
    switch (state) {
    case HAL_ALLOCATOR_BLOCK_ALLOCATED:
        return "active_allocated";
    case HAL_ALLOCATOR_BLOCK_PENDING_FREE:
        return "active_pending_free";
    default:
        return "inactive";
    }
}

uint64_t integerOf(const void *pointer)
{
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pointer));
}

// The "frames" of every dict that has a stack, symbolized in one batch as torch does for CUDA
// (py_symbolize shares the frames' strings); an empty list where none was recorded.
class Frames
{
  public:
    void add(py::dict &dest, const std::shared_ptr<c10::GatheredContext> &context)
    {
        auto *traceback = dynamic_cast<torch::CapturedTraceback *>(context.get());
        if (traceback == nullptr) {
            dest["frames"] = py::list();
            return;
        }
        tracebacks_.push_back(traceback);
        dests_.push_back(dest);
    }

    void fill()
    {
        std::vector<py::object> symbolized = torch::py_symbolize(tracebacks_);
        for (size_t i = 0; i < symbolized.size(); ++i)
            dests_[i]["frames"] = symbolized[i];
    }

  private:
    std::vector<torch::CapturedTraceback *> tracebacks_;
    std::vector<py::dict> dests_;
};

py::dict segmentOf(c10::DeviceIndex device, const hal_allocator_block_info_t &first, Frames &frames)
{
    py::dict segment;
    segment["device"] = static_cast<int>(device);
    segment["address"] = integerOf(first.segment_address);
    segment["total_size"] = static_cast<uint64_t>(first.segment_size);
    segment["stream"] = integerOf(first.stream);
    segment["segment_type"] = first.small_segment ? "small" : "large";
    segment["segment_pool_id"] = py::make_tuple(0, 0);
    segment["is_expandable"] = false;
    // The stack of the allocation that mapped it, where the history saw that happen.
    frames.add(segment,
               memorySegmentContext(device, reinterpret_cast<uintptr_t>(first.segment_address)));
    return segment;
}

py::dict snapshot()
{
    py::list segments, device_traces;
    Frames frames;
    for (c10::DeviceIndex device = 0; device < deviceCount(); ++device) {
        const std::vector<hal_allocator_block_info_t> blocks = deviceAllocatorBlocks(device);
        for (size_t i = 0; i < blocks.size();) {
            py::dict segment = segmentOf(device, blocks[i], frames);
            py::list segment_blocks;
            uint64_t allocated = 0, active = 0, requested = 0;
            const void *base = blocks[i].segment_address;
            for (; i < blocks.size() && blocks[i].segment_address == base; ++i) {
                const hal_allocator_block_info_t &b = blocks[i];
                py::dict block;
                block["address"] = integerOf(b.address);
                block["size"] = static_cast<uint64_t>(b.size);
                block["requested_size"] = static_cast<uint64_t>(b.requested);
                block["state"] = blockStateName(b.state);
                if (b.state == HAL_ALLOCATOR_BLOCK_ALLOCATED) {
                    allocated += b.size;
                    requested += b.requested;
                    frames.add(block, memoryBlockContext(b.address));
                } else {
                    block["frames"] = py::list();
                }
                if (b.state != HAL_ALLOCATOR_BLOCK_CACHED)
                    active += b.size;
                segment_blocks.append(block);
            }
            segment["allocated_size"] = allocated;
            segment["active_size"] = active;
            segment["requested_size"] = requested;
            segment["blocks"] = segment_blocks;
            segments.append(segment);
        }
        py::list trace;
        for (const MemoryTraceEntry &entry : memoryTrace(device)) {
            py::dict e;
            e["action"] = entry.action;
            // An "oom" keeps the device's free bytes where the others keep an address.
            const bool oom = std::string(entry.action) == "oom";
            e[oom ? "device_free" : "addr"] = static_cast<uint64_t>(entry.address);
            e["size"] = static_cast<uint64_t>(entry.size);
            e["stream"] = static_cast<uint64_t>(entry.stream);
            e["time_us"] = entry.time_us;
            frames.add(e, entry.context);
            trace.append(e);
        }
        device_traces.append(trace);
    }
    frames.fill();
    py::dict result;
    result["segments"] = segments;
    result["device_traces"] = device_traces;
    result["allocator_settings"] = py::dict();
    result["external_annotations"] = py::list();
    return result;
}

void recordHistory(std::optional<std::string> enabled, std::optional<std::string> context,
                   const std::string &stacks, size_t max_entries)
{
    auto one_of = [](const std::optional<std::string> &value,
                     std::initializer_list<const char *> allowed) {
        if (!value)
            return true;
        for (const char *a : allowed)
            if (*value == a)
                return true;
        return false;
    };
    if (!one_of(enabled, { "state", "all" }))
        throw py::value_error("torch_hal: _record_memory_history: enabled must be None, "
                              "\"state\" or \"all\", not \"" +
                              *enabled + "\"");
    if (!one_of(context, { "state", "alloc", "all" }))
        throw py::value_error("torch_hal: _record_memory_history: context must be None, "
                              "\"state\", \"alloc\" or \"all\", not \"" +
                              *context + "\"");
    if (stacks != "python" && stacks != "all")
        throw py::value_error("torch_hal: _record_memory_history: stacks must be \"python\" or "
                              "\"all\", not \"" +
                              stacks + "\"");
    MemoryHistorySettings settings;
    settings.enabled = enabled.has_value();
    settings.record_trace = enabled && *enabled == "all";
    settings.stacks_of_state = context.has_value();
    settings.stacks_of_alloc = context && (*context == "alloc" || *context == "all");
    settings.stacks_of_free = context && *context == "all";
    settings.cpp_frames = stacks == "all";
    settings.max_entries = max_entries;
    if (settings.enabled && settings.stacks_of_state)
        torch::installCapturedTracebackPython(); // Python frames in the gathered stacks
    setMemoryHistory(settings);
    // The segments there are now: the later segment_alloc / segment_free actions are changes.
    if (settings.enabled)
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            if (ownsDevice(i))
                recordDeviceSegments(i, /*note_only=*/true);
}

} // namespace

void initMemorySnapshotBindings(py::module &m)
{
    m.def("_memory_record_history", &recordHistory, py::arg("enabled"), py::arg("context"),
          py::arg("stacks"), py::arg("max_entries"),
          "Starts (enabled \"state\" or \"all\") or stops (None) recording the device "
          "allocator's history; the arguments of torch.cuda.memory._record_memory_history.");
    m.def("_memory_snapshot", &snapshot,
          "The device allocator's segments, blocks and recorded actions, as "
          "torch.cuda.memory._snapshot() reports CUDA's.");
}

} // namespace torch_hal
