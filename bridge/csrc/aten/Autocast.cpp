// SPDX-License-Identifier: Apache-2.0
// Autocast for the device: the op lists and cast policies CUDA uses, with bfloat16 as the
// default lower-precision type (torch.autocast("<device>") casts matmuls to bf16 and keeps
// reductions, norms, losses and softmax in fp32), and a "promote" policy that widens mixed
// lower-precision inputs instead of refusing them.
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

// The "promote" policy: the operator runs in the widest floating type among the autocast type
// and its floating device inputs (double inputs run as they are). PyTorch's own kernel for the
// policy (at::autocast::prioritize) refuses a lower-precision input that is not the autocast
// type, so torch.dot on float16 tensors under the default bfloat16 autocast raised; here the
// two widen to float32, as torch.promote_types does. Boxed: one kernel for every signature.
bool promotable(const c10::IValue &value)
{
    if (!value.isTensor())
        return false;
    const at::Tensor &t = value.toTensor();
    return t.defined() && t.is_floating_point() &&
           t.device().type() == c10::DeviceType::PrivateUse1 && t.scalar_type() != at::kDouble;
}

void promoteBoxed(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    const size_t num_args = op.schema().arguments().size();
    auto args = torch::jit::last(*stack, num_args);
    at::ScalarType type = at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1);
    auto widen = [&](const c10::IValue &v) {
        if (promotable(v))
            type = c10::promoteTypes(type, v.toTensor().scalar_type());
    };
    for (const c10::IValue &arg : args) {
        if (arg.isList()) {
            for (const c10::IValue &element : arg.toListRef())
                widen(element);
        } else {
            widen(arg);
        }
    }
    for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
        c10::IValue &arg = (*stack)[i];
        if (arg.isTensorList()) {
            auto list = arg.toTensorList();
            for (size_t j = 0; j < list.size(); ++j)
                if (promotable(list.get(j)) && list.get(j).scalar_type() != type)
                    list.set(j, list.get(j).to(type));
        } else if (arg.isOptionalTensorList()) {
            auto list = arg.toOptionalTensorList();
            for (size_t j = 0; j < list.size(); ++j) {
                std::optional<at::Tensor> element = list.get(j);
                if (element.has_value() && promotable(*element) && element->scalar_type() != type)
                    list.set(j, element->to(type));
            }
        } else if (promotable(arg) && arg.toTensor().scalar_type() != type) {
            arg = arg.toTensor().to(type);
        }
    }
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
    op.callBoxed(stack);
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
#define TORCH_HAL_PROMOTE(OP) \
    m.impl(#OP, torch::CppFunction::makeFromBoxedFunction<&promoteBoxed>());
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
