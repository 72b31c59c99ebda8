// SPDX-License-Identifier: Apache-2.0
// Dropout on the device takes the CPU's route.
//
// at::dropout sends CUDA, XPU and PrivateUse1 tensors to the fused native_dropout (a boolean
// mask, multiplied in and scaled) and CPU tensors to a float noise tensor (bernoulli_, divided
// by 1 - p, multiplied in). Through the fallback the device ran native_dropout's CPU kernel:
// the same bits, but the boolean mask is converted to the input's type in every forward and
// backward multiplication (TensorIterator copies mismatched inputs), which made dropout the
// device's most expensive operator beside the CPU's. Registered at the device's autograd key,
// dropout here is the CPU's composite itself, so the device computes, differentiates and
// costs what the CPU does (the backward is the multiplication's).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "runtime/Register.h"

namespace torch_hal
{
namespace
{

// at::native's _dropout_impl<feature_dropout = false, alpha_dropout = false, inplace = false>.
at::Tensor dropout(const at::Tensor &input, double p, bool train)
{
    TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
    if (p == 0 || !train || input.sym_numel() == 0)
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
    static auto *m = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
    m->impl("dropout", TORCH_FN(dropout));
}

} // namespace torch_hal
