// SPDX-License-Identifier: Apache-2.0
// Dropout on host-addressable devices: the CPU's composite path instead of the fused operator.
//
// aten::dropout sends every PrivateUse1 tensor to the fused native_dropout, as it does CUDA's.
// That operator exists for devices with a fused kernel; on a device whose operators run CPU
// kernels it is the CPU's native_dropout: a float mask drawn, the output scaled, the mask
// converted to bool, and in the backward converted back to the input's dtype and multiplied
// twice. The CPU itself takes the composite path (the mask drawn and scaled once, one multiply
// forward, one backward). On a host-addressable device that path is cheaper by two copies and a
// multiply per dropout and gives the same values as the CPU, so it is taken here too. A device
// that stages its operators through host memory keeps the fused operator: there it is one
// operator's staging instead of four. Traced tensors (torch.compile's fake and functional
// tensors) keep what the decomposition gives: native_dropout.
#include <ATen/ATen.h>
#include <ATen/ops/dropout_native.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

// A tensor that torch.compile traces, or any call while the Python dispatcher runs: aten's
// Python decomposition of dropout is what such callers see without this kernel.
bool traced(const at::Tensor &input)
{
    return c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::PythonDispatcher) ||
           input.key_set().has_any(
               c10::DispatchKeySet({ c10::DispatchKey::Python, c10::DispatchKey::Functionalize }));
}

at::Tensor dropout(const at::Tensor &input, double p, bool train)
{
    if (traced(input)) {
        // torch/_decomp's dropout, which the Python dispatcher would otherwise have run.
        if (train && p != 0)
            return std::get<0>(at::native_dropout(input, p, train));
        return input.clone();
    }
    if (!hostAddressable(input.device().index()))
        return at::native::dropout(input, p, train);
    // aten/src/ATen/native/Dropout.cpp's _dropout_impl, as the CPU runs it.
    TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
    if (p == 0 || !train || input.numel() == 0)
        return input;
    if (p == 1)
        return input.mul(at::zeros({}, input.options()));
    at::Tensor noise = at::empty_like(input);
    noise.bernoulli_(1 - p);
    noise.div_(1 - p);
    return input.mul(noise);
}

} // namespace

void registerDropout()
{
    // The autograd key: dropout is a composite operator whose own kernel would pick
    // native_dropout before any PrivateUse1 kernel is asked.
    static auto *m = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
    m->impl("dropout", TORCH_FN(dropout));
}

} // namespace torch_hal
