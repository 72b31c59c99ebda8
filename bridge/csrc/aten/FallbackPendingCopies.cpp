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

// Sets beyond this are waited for: a host that outruns its device by more than this many
// staged operators holds their buffers for no gain.
constexpr size_t kMaxHeldSets = 256;

struct HeldSet {
    c10::SmallVector<hal_event_t, 2> events; // one per device, recorded after the copies
    std::vector<c10::Storage> buffers;
};

struct Held {
    std::mutex mutex;
    std::deque<HeldSet> sets;
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
    HeldSet oldest;
    {
        Held &h = held();
        std::lock_guard<std::mutex> lock(h.mutex);
        h.sets.push_back(std::move(set));
        if (h.sets.size() > kMaxHeldSets) {
            oldest = std::move(h.sets.front());
            h.sets.pop_front();
        }
    }
    for (hal_event_t event : oldest.events)
        (void)hal_event_synchronize(event); // a failure is the stream's, reported by its next sync
    destroyEvents(oldest);
    releaseCopiedBuffers();
}

} // namespace torch_hal
