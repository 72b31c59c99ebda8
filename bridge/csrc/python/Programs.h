// SPDX-License-Identifier: Apache-2.0
// Python bindings of the HAL's programs and kernels (csrc/python/Programs.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_hal
{

// Adds _program_create, _program_destroy, _program_get_kernel, _kernel_signature,
// _kernel_launch and _program_format_name to `m`.
void initProgramBindings(pybind11::module &m);

} // namespace torch_hal
