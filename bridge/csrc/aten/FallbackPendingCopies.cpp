// SPDX-License-Identifier: Apache-2.0
// Host buffers that queued copies still read (FallbackPendingCopies.h).
#include "aten/FallbackPendingCopies.h"

#include <deque>
#include <mutex>
#include <utility>

#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

// Beyond these the oldest sets are waited for: a host that outruns its device by more than
// this many staged operators, or this many bytes, holds their buffers for no gain (and they are
// released only by a later staged call).
constexpr size_t kMaxHeldSets = 256;
constexpr size_t kMaxHeldBytes = size_t{ 256 } << 20;

struct HeldSet {
    c10::SmallVector<hal_event_t, 2> events; // one per device, recorded after the copies
    std::vector<c10::Storage> buffers;
    size_t bytes = 0;
};

struct Held {
    std::mutex mutex;
    std::deque<HeldSet> sets;
    size_t bytes = 0;
};

// Leaked: buffers still held at exit need not be released, and fallback calls may run during
// static destruction.
Held &held()
{
    static Held *const instance = new Held();
    return *instance;
}

void destroyEvents(HeldSet &set)
{
    for (hal_event_t event : set.events)
        (void)hal_event_destroy(event);
    set.events.clear();
}

bool completed(const HeldSet &set)
{
    for (hal_event_t event : set.events)
        if (hal_event_query(event) == HAL_NOT_READY)
            return false;
    return true;
}

} // namespace

void releaseCopiedBuffers()
{
    std::deque<HeldSet> done;
    {
        Held &h = held();
        std::lock_guard<std::mutex> lock(h.mutex);
        while (!h.sets.empty() && completed(h.sets.front())) {
            h.bytes -= h.sets.front().bytes;
            done.push_back(std::move(h.sets.front()));
            h.sets.pop_front();
        }
    }
    for (HeldSet &set : done) // the buffers are freed outside the lock
        destroyEvents(set);
}

void holdUntilCopied(const DeviceSet &devices, std::vector<c10::Storage> buffers)
{
    HeldSet set;
    set.buffers = std::move(buffers);
    for (const c10::Storage &buffer : set.buffers)
        set.bytes += buffer.nbytes();
    for (c10::DeviceIndex d : devices) {
        hal_event_t event = nullptr;
        hal_status_t st = hal_event_create(halDevice(d), HAL_EVENT_FLAG_NONE, &event);
        if (st == HAL_OK) {
            st = hal_event_record(event, currentHalStream(d));
            if (st == HAL_OK) {
                set.events.push_back(event);
                continue;
            }
            (void)hal_event_destroy(event);
        }
        // Without an event (out of host memory, say), wait for the copies here instead.
        destroyEvents(set);
        for (c10::DeviceIndex e : devices)
            synchronizeCurrentStream(e);
        return;
    }
    std::deque<HeldSet> oldest;
    {
        Held &h = held();
        std::lock_guard<std::mutex> lock(h.mutex);
        h.bytes += set.bytes;
        h.sets.push_back(std::move(set));
        while (!h.sets.empty() && (h.sets.size() > kMaxHeldSets || h.bytes > kMaxHeldBytes)) {
            h.bytes -= h.sets.front().bytes;
            oldest.push_back(std::move(h.sets.front()));
            h.sets.pop_front();
        }
    }
    for (HeldSet &old : oldest) {
        for (hal_event_t event : old.events)
            (void)hal_event_synchronize(event); // a failure is the stream's, reported later
        destroyEvents(old);
    }
    releaseCopiedBuffers();
}

} // namespace torch_hal
