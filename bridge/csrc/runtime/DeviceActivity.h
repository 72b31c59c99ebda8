// SPDX-License-Identifier: Apache-2.0
// The device's activity as torch.profiler shows it (KinetoProfiler.cpp): while a profiler
// session with the device's activity types records, the bridge reports what ran on the device
// (operators of the fallback, launches of HAL programs, staging copies), each linked to the CPU
// operator that issued it.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/Runtime.h"

namespace torch_hal
{

enum class DeviceActivityKind {
    Kernel, // an operator or program on the device
    Memcpy, // a copy touching device memory
    Memset,
    Sync, // an event record or a stream's wait: its runtime row only, as CUDA's are
};

// Whether a profiler session records the device's activity: one relaxed atomic load, so that
// callers skip all bookkeeping otherwise. Thread safety: safe.
bool deviceActivityRecording() noexcept;

// Host clock in nanoseconds since the epoch, the profiler's clock.
int64_t deviceActivityNow() noexcept;

// One activity of the device, as recordDeviceActivity takes it.
struct DeviceActivity {
    DeviceActivityKind kind;
    const char *name;   // what ran (copied)
    c10::Stream stream; // where it ran
    int64_t start_ns;   // when, on the host clock (deviceActivityNow)
    int64_t end_ns;
    // The host-side call that issued it (a runtime row on the calling thread); call == nullptr:
    // none of its own (it belongs to the call of an activity recorded with it).
    const char *call;
    int64_t call_start_ns;
    int64_t call_end_ns;
    int64_t bytes;      // copies: bytes copied
    const char *detail; // a short note shown with it, or null (a string literal)
};

// Records an activity that ran on the device (an operator the fallback ran in place or staged,
// a staging copy), issued by the calling thread's current CPU operator. Ignored unless
// recording. Thread safety: safe.
void recordDeviceActivity(const DeviceActivity &activity);

// What a collective's device row says of it: the fields NCCL's process group gives its
// record_param_comms operator, under the same names in the trace (so that tools reading those
// find them on the device row too), and the peer of a send or receive.
struct CollectiveDescription {
    std::string name;         // "Collective name": the c10d operation ("allreduce")
    std::string dtype;        // "dtype": PyTorch's name of the element type ("Float")
    int64_t in_elements = 0;  // "In msg nelems"
    int64_t out_elements = 0; // "Out msg nelems"
    std::string group_name;   // "Process Group Name"
    std::string group_desc;   // "Process Group Description"
    std::string group_ranks;  // "Process Group Ranks": the group's global ranks, "[0, 1]"
    int64_t group_size = 0;   // "Group size"
    int64_t rank = -1;        // "Rank": this process's rank in the group
    int64_t peer = -1;        // "Peer rank": a send's or receive's peer (global rank), or -1
};

// Records an event record or a stream's wait on an event (`call`: "hal_event_record",
// "hal_stream_wait_event") issued by the calling thread's current CPU operator, as a runtime row
// with the stream, between start_ns and end_ns (deviceActivityNow). Ignored unless recording.
// Thread safety: safe.
void recordStreamSync(const char *call, const c10::Stream &stream, int64_t start_ns,
                      int64_t end_ns);

// An activity enqueued on a stream (a HAL program launch, a copy), timed by HAL timing events
// on it: constructed before enqueuing, end() after; its runtime row is the HAL call. The device's
// times are read when the session stops. Does nothing unless recording, or where the device has no
// timing events. Not copyable; one thread.
class StreamActivity
{
  public:
    StreamActivity(DeviceActivityKind kind, const char *name, const c10::Stream &stream,
                   int64_t bytes = 0, const char *detail = nullptr);
    // A collective's row: what it carries beyond its bytes (before end()).
    void describe(std::shared_ptr<const CollectiveDescription> collective);
    void end();
    ~StreamActivity();
    StreamActivity(const StreamActivity &) = delete;
    StreamActivity &operator=(const StreamActivity &) = delete;

  private:
    DeviceActivityKind kind_;
    const char *name_;
    c10::Stream stream_;
    int64_t bytes_;
    const char *detail_;
    int64_t host_start_ = 0;
    hal_event_t start_ = nullptr;
    std::shared_ptr<const CollectiveDescription> collective_;
};

} // namespace torch_hal
