// SPDX-License-Identifier: Apache-2.0
// Registers the boxed CPU fallback (Fallback.cpp) for the device: for every operator without a
// kernel of its own, and instead of PyTorch's generic composites where the CPU has a kernel.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "aten/Common.h"
#include "runtime/Allocator.h"
#include "runtime/Register.h"

namespace torch_hal
{
namespace
{

void boxedFallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    cpuFallback(op, stack);
}

} // namespace

void registerFallback()
{
    bool any_host_addressable = false;
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
        any_host_addressable = any_host_addressable || (ownsDevice(i) && hostAddressable(i));
    if (any_host_addressable)
        installCpuAllocatorRouting();
    static auto *library = new torch::Library(torch::Library::IMPL, "_",
                                              c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    library->fallback(torch::CppFunction::makeFromBoxedFunction<&boxedFallback>());

    // Structured operators reach a backend without kernels through PyTorch's generic
    // functional wrapper (CompositeExplicitAutogradNonFunctional): it allocates the outputs on
    // the device and calls the out= variant. Running their own CPU kernel instead saves that
    // detour (and, when staging, copying the blank outputs to the host), and keeps the CPU
    // kernel's output sizing and warnings.
    // The same for operators with a CPU kernel and a CompositeExplicitAutograd one (e.g.
    // native_layer_norm, native_group_norm): a backend without kernels would get the
    // composite, whose arithmetic differs from the CPU kernel's in the last bits, so the device
    // would not compute what the CPU computes.
    static auto *direct = new torch::Library(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto &dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
        if (name.name.rfind("aten::", 0) != 0)
            continue;
        auto op = dispatcher.findOp(name);
        if (!op ||
            !(op->hasKernelForDispatchKey(
                  c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
              op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) ||
            !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
            op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
            continue;
        std::string qualified = name.name;
        if (!name.overload_name.empty())
            qualified += "." + name.overload_name;
        direct->impl(qualified.c_str(),
                     torch::CppFunction::makeFromBoxedFunction<&boxedFallback>());
    }
}

} // namespace torch_hal
