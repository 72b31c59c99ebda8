// SPDX-License-Identifier: Apache-2.0
// The legacy autograd profiler's device hooks (torch.autograd.profiler.profile(use_device=
// "<device>")): what CUDA's profiler stubs do, with HAL timing events. The profiler records an
// event on the current stream at the start and end of every operator and reports the time
// between them as the operator's device time.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

struct HalProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
    void record(c10::DeviceIndex *device, torch::profiler::impl::ProfilerVoidEventStub *event,
                int64_t *cpu_ns) const override
    {
        c10::DeviceIndex index = currentDevice();
        if (device != nullptr)
            *device = index;
        uint32_t flags = (deviceProperties(index).capabilities & HAL_DEVICE_CAP_TIMING_EVENTS) != 0
                             ? HAL_EVENT_FLAG_TIMING
                             : HAL_EVENT_FLAG_NONE;
        hal_event_t ev = nullptr;
        TORCH_HAL_CHECK(hal_event_create(halDevice(index), flags, &ev));
        *event = std::shared_ptr<void>(ev, [](void *p) {
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(static_cast<hal_event_t>(p)));
        });
        if (cpu_ns != nullptr)
            *cpu_ns = c10::getTime();
        TORCH_HAL_CHECK(hal_event_record(ev, currentHalStream(index)));
    }

    // Microseconds, as CUDA's stubs report them.
    float elapsed(const torch::profiler::impl::ProfilerVoidEventStub *start,
                  const torch::profiler::impl::ProfilerVoidEventStub *end) const override
    {
        auto *a = static_cast<hal_event_t>(start->get());
        auto *b = static_cast<hal_event_t>(end->get());
        TORCH_HAL_CHECK(hal_event_synchronize(a));
        TORCH_HAL_CHECK(hal_event_synchronize(b));
        float ms = 0;
        TORCH_HAL_CHECK(hal_event_elapsed_ms(a, b, &ms));
        return ms * 1000.0F;
    }

    // The HAL has no annotation ranges; nothing to mark.
    void mark(const char * /*name*/) const override {}
    void rangePush(const char * /*name*/) const override {}
    void rangePop() const override {}

    bool enabled() const override
    {
        return true;
    }

    void onEachDevice(std::function<void(int)> op) const override
    {
        c10::DeviceIndex previous = currentDevice();
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) {
            if (!ownsDevice(i))
                continue; // another process's device of the node
            setCurrentDevice(i);
            op(i);
        }
        setCurrentDevice(previous);
    }

    void synchronize() const override
    {
        TORCH_HAL_CHECK(hal_device_synchronize(halDevice(currentDevice())));
    }
};

} // namespace

void registerProfilerStubs()
{
    // The profiler keeps the pointer for the life of the process.
    static HalProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
}

} // namespace torch_hal
