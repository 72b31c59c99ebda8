// SPDX-License-Identifier: Apache-2.0
// What torch_hal registers with PyTorch, in the order registerAll() calls it. Nothing is
// registered when the module is loaded: only after the HAL backend opened successfully.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace torch_hal
{

void registerGuard();          // DeviceGuardImplInterface (runtime/Guard.cpp)
void registerHooks();          // allocators, hooks, generators (runtime/Hooks.cpp)
void registerOperators();      // native kernels (aten/Ops.cpp)
void registerFallback();       // the boxed CPU fallback (aten/FallbackRegistration.cpp)
void registerAutocast();       // AutocastPrivateUse1 (aten/Autocast.cpp)
void registerRnnCells();       // the fused LSTM and GRU cells (aten/Rnn.cpp)
void registerAttention();      // the fused attention kernels (aten/Attention.cpp)
void registerDropout();        // dropout's path on host-addressable devices (aten/Dropout.cpp)
void registerBernoulli();      // bernoulli_(p) drawn in blocks (aten/Bernoulli.cpp)
void registerProfilerStubs();  // the legacy profiler's device hooks (runtime/Profiler.cpp)
void registerKinetoProfiler(); // the device in torch.profiler (runtime/KinetoProfiler.cpp)

// Registers everything above once; later calls do nothing.
void registerAll();

// The default generator of a device (a CPU-style mt19937 generator per device).
const at::Generator &defaultGenerator(c10::DeviceIndex index);
at::Generator newGenerator(c10::DeviceIndex index);

} // namespace torch_hal
