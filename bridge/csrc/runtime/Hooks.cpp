// SPDX-License-Identifier: Apache-2.0
// PrivateUse1HooksInterface, per-device generators, and the registration of the allocators.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>

#include <vector>

#include "runtime/Allocator.h"
#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

// A CPU-style generator (mt19937, the CPU state format for get/set_rng_state) per device. The
// operators that consume it run CPU kernels, so the same seed gives the same numbers as on CPU.
class HalGeneratorImpl final : public at::CPUGeneratorImpl
{
  public:
    explicit HalGeneratorImpl(c10::DeviceIndex index)
    {
        device_ = c10::Device(kDeviceType, index);
        key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
    }

    // The CPU's mt19937 engine has a state, not a Philox offset; the CPU generator's refusal
    // would name the CPU.
    void set_offset(uint64_t /*offset*/) override
    {
        TORCH_CHECK(false, "torch_hal: the ", deviceTypeName(),
                    " generator does not use an offset (it is the CPU's mt19937 generator, "
                    "whose state get_state()/set_state() save and restore)");
    }

    uint64_t get_offset() const override
    {
        TORCH_CHECK(false, "torch_hal: the ", deviceTypeName(),
                    " generator does not use an offset (it is the CPU's mt19937 generator, "
                    "whose state get_state()/set_state() save and restore)");
    }

  private:
    HalGeneratorImpl *clone_impl() const override
    {
        // The base class keeps its state private and its getters non-const.
        auto *self = const_cast<HalGeneratorImpl *>(this);
        auto *copy = new HalGeneratorImpl(device_.index());
        copy->set_engine(self->engine());
        copy->set_next_float_normal_sample(self->next_float_normal_sample());
        copy->set_next_double_normal_sample(self->next_double_normal_sample());
        return copy;
    }
};

struct HalHooks final : public at::PrivateUse1HooksInterface {
    bool isBuilt() const override
    {
        return true;
    }

    bool isAvailable() const override
    {
        return torch_hal::deviceCount() > 0;
    }

    // HAL devices are opened with the backend, so every valid device has its "context".
    bool hasPrimaryContext(c10::DeviceIndex device_index) const override
    {
        return torch_hal::ownsDevice(device_index);
    }

    void init() const override {}

    c10::DeviceIndex deviceCount() const override
    {
        return torch_hal::deviceCount();
    }

    void setCurrentDevice(c10::DeviceIndex device) const override
    {
        torch_hal::setCurrentDevice(device);
    }

    c10::DeviceIndex getCurrentDevice() const override
    {
        return torch_hal::currentDevice();
    }

    c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override
    {
        return torch_hal::exchangeDevice(device);
    }

    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override
    {
        return torch_hal::exchangeDevice(device);
    }

    bool isPinnedPtr(const void *data) const override
    {
        return isPinnedPointer(data);
    }

    c10::Allocator *getPinnedMemoryAllocator() const override
    {
        return hostAllocator();
    }

    c10::Device getDeviceFromPtr(void *data) const override
    {
        c10::DeviceIndex index = deviceOfPointer(data);
        TORCH_CHECK(index >= 0, "torch_hal (backend '", backendName(), "'): pointer ", data,
                    " is not device memory of this backend");
        return c10::Device(kDeviceType, index);
    }

    const at::Generator &getDefaultGenerator(c10::DeviceIndex device_index) const override
    {
        return defaultGenerator(device_index);
    }

    at::Generator getNewGenerator(c10::DeviceIndex device_index) const override
    {
        return newGenerator(device_index);
    }

    void resizePrivateUse1Bytes(const c10::Storage &storage, size_t newsize) const override
    {
        resizeDeviceStorage(storage.unsafeGetStorageImpl(), newsize);
    }
};

} // namespace

const at::Generator &defaultGenerator(c10::DeviceIndex index)
{
    // Made once, as a function-local static: after that a read is one load, where
    // std::call_once writes two thread-locals on every random operator.
    static const std::vector<at::Generator> generators = [] {
        std::vector<at::Generator> made;
        for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
            made.push_back(at::make_generator<HalGeneratorImpl>(i));
        return made;
    }();
    if (index < 0)
        index = currentDevice();
    // Every device of the node has one, as on CUDA (manual_seed_all, get_rng_state_all): a
    // generator is host state, whichever process owns the device.
    checkDeviceIndex(index);
    return generators[static_cast<size_t>(index)];
}

at::Generator newGenerator(c10::DeviceIndex index)
{
    if (index < 0)
        index = currentDevice();
    checkDevice(index);
    return at::make_generator<HalGeneratorImpl>(index);
}

void registerHooks()
{
    c10::SetAllocator(kDeviceType, deviceAllocator());
    at::setHostAllocator(kDeviceType, hostAllocator());
    at::RegisterPrivateUse1HooksInterface(new HalHooks());
}

} // namespace torch_hal
