// SPDX-License-Identifier: Apache-2.0
// DeviceGuardImplInterface for PrivateUse1 on the HAL: devices, streams and versioned events.
// This is what torch.Stream/torch.Event, torch.accelerator, DeviceGuard/StreamGuard and the
// autograd engine's cross-stream synchronisation use.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/Allocator.h"
#include "runtime/DeviceActivity.h"
#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

hal_event_t asEvent(void *event)
{
    return static_cast<hal_event_t>(event);
}

struct HalGuardImpl final : public c10::impl::DeviceGuardImplInterface {
    c10::DeviceType type() const override
    {
        return kDeviceType;
    }

    c10::Device exchangeDevice(c10::Device d) const override
    {
        TORCH_CHECK(d.type() == kDeviceType, "torch_hal: expected a ", deviceTypeName(),
                    " device, got ", d);
        return c10::Device(kDeviceType, torch_hal::exchangeDevice(d.index()));
    }

    c10::Device getDevice() const override
    {
        return c10::Device(kDeviceType, currentDevice());
    }

    void setDevice(c10::Device d) const override
    {
        TORCH_CHECK(d.type() == kDeviceType, "torch_hal: expected a ", deviceTypeName(),
                    " device, got ", d);
        setCurrentDevice(d.index());
    }

    void uncheckedSetDevice(c10::Device d) const noexcept override
    {
        setCurrentDeviceUnchecked(d.index());
    }

    c10::Stream getStream(c10::Device d) const override
    {
        return currentStream(d.index());
    }

    c10::Stream getDefaultStream(c10::Device d) const override
    {
        return defaultStream(d.index());
    }

    c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override
    {
        return streamFromPool(d.index(), high_priority);
    }

    c10::Stream getNewStream(c10::Device d, int priority) const override
    {
        return streamFromPool(d.index(), priority < 0);
    }

    c10::Stream exchangeStream(c10::Stream s) const override
    {
        return torch_hal::exchangeStream(s);
    }

    void *getStreamNativeHandle(const c10::Stream s) const override
    {
        return halStream(s);
    }

    c10::DeviceIndex deviceCount() const noexcept override
    {
        return torch_hal::deviceCount();
    }

    // Device memory holds any dtype's bytes and the fallback computes on them, except the
    // quantized dtypes, which the device refuses (see refuseQuantized in aten/Ops.cpp).
    c10::DeviceCapability getDeviceCapability(c10::Device d) const override
    {
        checkDevice(resolveDevice(d.index()));
        c10::DeviceCapability cap;
        for (c10::ScalarTypeIndex quantized :
             { c10::kIndex_QInt8, c10::kIndex_QUInt8, c10::kIndex_QInt32, c10::kIndex_QUInt4x2,
               c10::kIndex_QUInt2x4 })
            cap.capability_data.capability_bits &= ~(1ULL << quantized);
        return cap;
    }

    // Events are created lazily by the first record, on the recording stream's device, as
    // CUDA's guard does; an event that was never recorded is complete.
    void record(void **event, const c10::Stream &stream, const c10::DeviceIndex device_index,
                const c10::EventFlag flag) const override
    {
        TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                    "torch_hal: event device index ", static_cast<int>(device_index),
                    " does not match the recording stream's device index ",
                    static_cast<int>(stream.device_index()));
        hal_event_t ev = asEvent(*event);
        if (ev == nullptr) {
            c10::DeviceIndex index = stream.device_index();
            uint32_t flags = HAL_EVENT_FLAG_NONE;
            // PYTORCH_DEFAULT is "no timing" (cudaEventDisableTiming); BACKEND_DEFAULT is what
            // torch.Event(enable_timing=True) asks for.
            if (flag == c10::EventFlag::BACKEND_DEFAULT &&
                (deviceProperties(index).capabilities & HAL_DEVICE_CAP_TIMING_EVENTS) != 0)
                flags = HAL_EVENT_FLAG_TIMING;
            TORCH_HAL_CHECK(hal_event_create(halDevice(index), flags, &ev));
            *event = ev;
        }
        const int64_t start = deviceActivityRecording() ? deviceActivityNow() : 0;
        TORCH_HAL_CHECK(hal_event_record(ev, halStream(stream)));
        if (start != 0) // torch.profiler: a runtime row, as CUDA's cudaEventRecord
            recordStreamSync("hal_event_record", stream, start, deviceActivityNow());
    }

    void block(void *event, const c10::Stream &stream) const override
    {
        if (event == nullptr)
            return;
        const int64_t start = deviceActivityRecording() ? deviceActivityNow() : 0;
        TORCH_HAL_CHECK(hal_stream_wait_event(halStream(stream), asEvent(event)));
        if (start != 0) // torch.profiler: a runtime row, as CUDA's cudaStreamWaitEvent
            recordStreamSync("hal_stream_wait_event", stream, start, deviceActivityNow());
    }

    bool queryEvent(void *event) const override
    {
        if (event == nullptr)
            return true;
        hal_status_t st = hal_event_query(asEvent(event));
        if (st == HAL_NOT_READY)
            return false;
        TORCH_HAL_CHECK(st);
        return true;
    }

    void destroyEvent(void *event, const c10::DeviceIndex /*device_index*/) const noexcept override
    {
        if (event != nullptr)
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(asEvent(event)));
    }

    bool queryStream(const c10::Stream &stream) const override
    {
        hal_status_t st = hal_stream_query(halStream(stream));
        if (st == HAL_NOT_READY)
            return false;
        TORCH_HAL_CHECK(st);
        return true;
    }

    void synchronizeStream(const c10::Stream &stream) const override
    {
        TORCH_HAL_CHECK(hal_stream_synchronize(halStream(stream)));
    }

    void synchronizeEvent(void *event) const override
    {
        if (event != nullptr)
            TORCH_HAL_CHECK(hal_event_synchronize(asEvent(event)));
    }

    void synchronizeDevice(const c10::DeviceIndex device_index) const override
    {
        TORCH_HAL_CHECK(hal_device_synchronize(halDevice(device_index)));
    }

    void recordDataPtrOnStream(const c10::DataPtr &data_ptr,
                               const c10::Stream &stream) const override
    {
        recordDeviceBlockOnStream(data_ptr, stream);
    }

    double elapsedTime(void *start, void *end,
                       const c10::DeviceIndex /*device_index*/) const override
    {
        TORCH_CHECK(start != nullptr && end != nullptr, "torch_hal (backend '", backendName(),
                    "'): both events must be recorded before calculating elapsed time");
        float ms = 0;
        TORCH_HAL_CHECK(hal_event_elapsed_ms(asEvent(start), asEvent(end), &ms));
        return static_cast<double>(ms);
    }
};

} // namespace

void registerGuard()
{
    // The registry does not own its entries and expects them to outlive the process.
    static c10::impl::DeviceGuardImplRegistrar registrar(kDeviceType, new HalGuardImpl());
}

} // namespace torch_hal
