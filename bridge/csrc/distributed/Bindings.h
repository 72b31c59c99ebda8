// SPDX-License-Identifier: Apache-2.0
// Python bindings of torch_hal's c10d process group (csrc/distributed/).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_hal
{

// Adds torch_hal._C.ProcessGroupHAL to `m` (once). Needs torch.distributed imported: its
// Backend class is the base class.
void initDistributedBindings(pybind11::module &m);

} // namespace torch_hal
