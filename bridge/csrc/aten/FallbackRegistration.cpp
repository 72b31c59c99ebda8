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

// Whether the device tensors among an operator's arguments (tensor lists included) are all on
// one device.
bool argumentsOnOneDevice(const c10::OperatorHandle &op, const torch::jit::Stack &stack)
{
    const size_t count = op.schema().arguments().size();
    c10::DeviceIndex device = -1;
    auto same = [&device](const at::Tensor &t) {
        if (!isDeviceTensor(t))
            return true;
        if (device < 0)
            device = t.device().index();
        return t.device().index() == device;
    };
    for (size_t i = stack.size() - count; i < stack.size(); ++i) {
        const c10::IValue &v = stack[i];
        if (v.isTensor() && !same(v.toTensor()))
            return false;
        if (v.isTensorList())
            for (const c10::IValue &element : v.toListRef())
                if (!same(element.toTensor()))
                    return false;
    }
    return true;
}

// ATen's _foreach_* operators have no CPU kernel: on the CPU, and on a backend without kernels
// of its own, their CompositeExplicitAutograd kernel runs one operator per list element, so each
// element went through the fallback by itself (the fallback's fixed cost for each, and on a
// device that stages, a call's copies for each). One fallback call takes the whole lists, and
// the CPU runs the same composite on them, element by element, as it does for CPU tensors.
// Lists that span several devices keep the composite (a fallback call is on one device): the
// CPU's entry is that composite, since the operator has no CPU kernel.
void foreachFallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    if (argumentsOnOneDevice(op, *stack))
        cpuFallback(op, stack);
    else
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
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
    // And the _foreach_* operators, as one call each (foreachFallback).
    static auto *direct = new torch::Library(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    auto &dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
        if (name.name.rfind("aten::", 0) != 0)
            continue;
        auto op = dispatcher.findOp(name);
        if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1))
            continue;
        const bool explicit_composite =
            op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
        const bool composite =
            explicit_composite ||
            op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
        const bool foreach = name.name.rfind("aten::_foreach_", 0) == 0;
        std::string qualified = name.name;
        if (!name.overload_name.empty())
            qualified += "." + name.overload_name;
        if (op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
            if (composite)
                direct->impl(qualified.c_str(),
                             torch::CppFunction::makeFromBoxedFunction<&boxedFallback>());
        } else if (foreach && explicit_composite) {
            direct->impl(qualified.c_str(),
                         torch::CppFunction::makeFromBoxedFunction<&foreachFallback>());
        }
    }
}

} // namespace torch_hal
