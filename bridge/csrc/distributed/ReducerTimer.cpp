// SPDX-License-Identifier: Apache-2.0
// DDP's per-iteration timings (forward, backward compute, backward communication) for the
// torch_hal device: c10d's TimerRegistry has timers for CPU and CUDA only, and DDP warns
// ("Time stats are currently only collected for CPU and CUDA devices") for any other device.
// As CUDA's timer: timing events recorded on the current stream, measured when DDP logs.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>

#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

class HalTimer : public c10d::Timer
{
  public:
    explicit HalTimer(c10::Device device) : device_(device) {}

    void record(Event event) override
    {
        Timer::record(event); // the host timestamp
        try {
            c10::DeviceGuard guard(device_);
            eventOf(event).record(currentStream(device_.index()));
        } catch (const c10::Error &) {
            // Timing is diagnostics: a device without timing events just reports none.
        }
    }

    std::optional<int64_t> measureDifference(Event start, Event end) override
    {
        c10::Event &a = eventOf(start);
        c10::Event &b = eventOf(end);
        // Events of phases that did not run this iteration (no backward, no_sync) were never
        // recorded.
        if (!a.was_marked_for_recording() || !b.was_marked_for_recording())
            return std::nullopt;
        try {
            c10::DeviceGuard guard(device_);
            // DDP measures at the start of the next forward, when these are done anyway.
            a.synchronize();
            b.synchronize();
            double ms = a.elapsedTime(b);
            if (ms < 0)
                return std::nullopt;
            return static_cast<int64_t>(ms * 1e6);
        } catch (const c10::Error &) {
            return std::nullopt;
        }
    }

  private:
    c10::Event &eventOf(Event event)
    {
        switch (event) {
        case Event::kForwardStart:
            return forward_start_;
        case Event::kBackwardComputeStart:
            return backward_compute_start_;
        case Event::kBackwardComputeEnd:
            return backward_compute_end_;
        case Event::kBackwardCommStart:
            return backward_comm_start_;
        case Event::kBackwardCommEnd:
        default:
            return backward_comm_end_;
        }
    }

    static c10::Event timingEvent()
    {
        // BACKEND_DEFAULT asks the guard for a timing event (HAL_EVENT_FLAG_TIMING).
        return c10::Event(kDeviceType, c10::EventFlag::BACKEND_DEFAULT);
    }

    c10::Device device_;
    c10::Event forward_start_ = timingEvent();
    c10::Event backward_compute_start_ = timingEvent();
    c10::Event backward_compute_end_ = timingEvent();
    c10::Event backward_comm_start_ = timingEvent();
    c10::Event backward_comm_end_ = timingEvent();
};

} // namespace
} // namespace torch_hal

namespace c10d
{
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_hal::HalTimer)
} // namespace c10d
