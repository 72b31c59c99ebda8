// SPDX-License-Identifier: Apache-2.0
// The fallback's generator loans (FallbackGenerators.h).
#include "aten/FallbackGenerators.h"

#include <ATen/CPUGeneratorImpl.h>

#include "runtime/Register.h" // defaultGenerator
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

void copyGeneratorState(const at::Generator &from, const at::Generator &to)
{
    auto *src = from.get<at::CPUGeneratorImpl>();
    auto *dst = to.get<at::CPUGeneratorImpl>();
    dst->set_engine(src->engine());
    dst->set_next_float_normal_sample(src->next_float_normal_sample());
    dst->set_next_double_normal_sample(src->next_double_normal_sample());
}

} // namespace

void GeneratorLoans::substitute(c10::IValue &slot, c10::DeviceIndex device_index,
                                const c10::OperatorName &op)
{
    at::Generator device;
    if (slot.isNone())
        device = defaultGenerator(device_index);
    else if (slot.isGenerator() && slot.toGenerator().device().type() == kDeviceType)
        device = slot.toGenerator();
    else
        return;
    for (const Swap &swap : swaps_)
        TORCH_CHECK(swap.device.unsafeGetGeneratorImpl() != device.unsafeGetGeneratorImpl(),
                    "torch_hal: the same generator is passed twice to ", op);
    Swap swap;
    swap.lock = std::unique_lock<std::mutex>(device.mutex());
    swap.device = device;
    swap.cpu = at::make_generator<at::CPUGeneratorImpl>();
    copyGeneratorState(device, swap.cpu);
    slot = c10::IValue(swap.cpu);
    swaps_.push_back(std::move(swap));
}

// The kernel locks the CPU generator itself, so it is only locked while states move; another
// thread drawing CPU random numbers during the call would see the device state.
void GeneratorLoans::lendDefaultCpuGeneratorUnlessSubstituted(c10::DeviceIndex device_index)
{
    if (!swaps_.empty())
        return;
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    at::Generator device = defaultGenerator(device_index);
    std::scoped_lock lock(cpu.mutex(), device.mutex());
    saved_cpu_state_ = at::make_generator<at::CPUGeneratorImpl>();
    copyGeneratorState(cpu, saved_cpu_state_);
    copyGeneratorState(device, cpu);
    default_lent_from_ = device_index;
}

void GeneratorLoans::restore()
{
    if (default_lent_from_ >= 0) {
        at::Generator cpu = at::detail::getDefaultCPUGenerator();
        at::Generator device = defaultGenerator(default_lent_from_);
        std::scoped_lock lock(cpu.mutex(), device.mutex());
        copyGeneratorState(cpu, device);
        copyGeneratorState(saved_cpu_state_, cpu);
        default_lent_from_ = -1;
    }
    for (Swap &swap : swaps_)
        copyGeneratorState(swap.cpu, swap.device);
    swaps_.clear(); // unlocks
}

} // namespace torch_hal
