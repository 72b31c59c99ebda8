// SPDX-License-Identifier: Apache-2.0
// Random-number generators for the fallback's CPU kernels (FallbackGenerators.cpp).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/operator_name.h>
#include <c10/core/Device.h>

#include <mutex>
#include <vector>

namespace torch_hal
{

// CPU kernels accept only CPU generators, and random operators without a Generator argument
// (native_dropout) draw from the CPU default generator. For one fallback call this lends CPU
// generators the device generators' states and gives the states back afterwards, so that the
// device's random numbers are the device generator's. Not thread-safe itself: one per call;
// the device generators stay locked while lent.
class GeneratorLoans
{
  public:
    // Replaces a Generator argument (None: the default generator of `device`; a device
    // generator) with a CPU generator carrying its state; leaves other generators alone. Throws
    // when the same generator is passed twice to `op`.
    void substitute(c10::IValue &slot, c10::DeviceIndex device, const c10::OperatorName &op);
    // Lends the CPU default generator the state of `device`'s default generator, unless a
    // Generator argument was substituted (call after every substitute()).
    void lendDefaultCpuGeneratorUnlessSubstituted(c10::DeviceIndex device);
    // Copies the states back to the device generators and unlocks them; the CPU default
    // generator gets its own state back. Idempotent.
    void restore();

  private:
    struct Swap {
        at::Generator device;
        at::Generator cpu;
        std::unique_lock<std::mutex> lock;
    };
    std::vector<Swap> swaps_;
    c10::DeviceIndex default_lent_from_ = -1; // device whose default generator the CPU's has
    at::Generator saved_cpu_state_;
};

} // namespace torch_hal
