// SPDX-License-Identifier: Apache-2.0
// Buffer allocation for Inductor's generated wrappers (csrc/python/CompiledAllocation.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_hal
{

// Adds _empty_strided(size: tuple, stride: tuple, dtype, device_index) to `m`: a device tensor
// from the device's caching allocator, without torch.empty_strided's argument parsing and
// dispatch, for the buffers of compiled graphs (what empty_strided_cpu is to CPU graphs).
void initCompiledAllocationBindings(pybind11::module &m);

} // namespace torch_hal
