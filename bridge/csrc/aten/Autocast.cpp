// SPDX-License-Identifier: Apache-2.0
// Autocast for the device: the op lists and cast policies CUDA uses, with bfloat16 as the
// default lower-precision type (torch.autocast("<device>") casts matmuls to bf16 and keeps
// reductions, norms, losses and softmax in fp32).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "runtime/Register.h"

namespace torch_hal
{
namespace
{

// CUDA's autocast bans this op (its message, word for word): in lower precision its log()
// saturates, and the fused form is the fix.
at::Tensor binaryCrossEntropyBanned(const at::Tensor & /*self*/, const at::Tensor & /*target*/,
                                    const std::optional<at::Tensor> & /*weight*/,
                                    int64_t /*reduction*/)
{
    TORCH_CHECK(false, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe "
                       "to autocast.\nMany models use a sigmoid layer right before the binary "
                       "cross entropy layer.\nIn this case, combine the two layers using "
                       "torch.nn.functional.binary_cross_entropy_with_logits\nor "
                       "torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
                       "BCEWithLogits are\nsafe to autocast.");
}

} // namespace

void registerAutocast()
{
    // Operators without a policy run unchanged.
    static auto *fallthrough = new torch::Library(
        torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    fallthrough->fallback(torch::CppFunction::makeFallthrough());

    static auto *lib = new torch::Library(
        torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    torch::Library &m = *lib; // the KERNEL_* macros register into `m`...
    using namespace at;       // ...and name ATen types unqualified

#define TORCH_HAL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
    AT_FORALL_LOWER_PRECISION_FP(TORCH_HAL_LOWER_PRECISION_FP)
#define TORCH_HAL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
    AT_FORALL_FP32(TORCH_HAL_FP32)
#define TORCH_HAL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
    AT_FORALL_FP32_SET_OPT_DTYPE(TORCH_HAL_FP32_SET_OPT_DTYPE)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TORCH_HAL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
    AT_FORALL_PROMOTE(TORCH_HAL_PROMOTE)
#undef TORCH_HAL_LOWER_PRECISION_FP
#undef TORCH_HAL_FP32
#undef TORCH_HAL_FP32_SET_OPT_DTYPE
#undef TORCH_HAL_PROMOTE
    m.impl("binary_cross_entropy", TORCH_FN(binaryCrossEntropyBanned));

    // PyTorch's default for PrivateUse1 is float16. The setting is thread-local: this sets it
    // for the thread that loads torch_hal (normally the main thread).
    at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, at::kBFloat16);
}

} // namespace torch_hal
