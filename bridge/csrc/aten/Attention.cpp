// SPDX-License-Identifier: Apache-2.0
// Scaled dot-product attention: the device's route to a fused attention kernel.
//
// scaled_dot_product_attention asks the device's _fused_sdp_choice stub which kernel to take;
// with no stub registered, PrivateUse1 always took the unfused math path, so a device tensor
// got other bits than the same tensor on the CPU (which takes the CPU flash kernel). The stub
// registered here makes the CPU's choice, and where that is the flash kernel it answers
// "overrideable": PyTorch then calls _scaled_dot_product_fused_attention_overrideable (and its
// backward), the operators a PrivateUse1 backend implements to bring its own fused kernel.
// Here they run the CPU flash kernels on the device's tensors, through the fallback like every
// other operator, so attention on the device is bit for bit what it is on the CPU.
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

int64_t fusedSdpChoice(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
                       const std::optional<at::Tensor> &attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa)
{
    // The CPU kernel of the choice looks only at shapes, dtypes, strides and flags, never at
    // the data or the device.
    int64_t cpu_choice = at::cpu::_fused_sdp_choice(query, key, value, attn_mask, dropout_p,
                                                    is_causal, scale, enable_gqa);
    if (cpu_choice == static_cast<int64_t>(at::SDPBackend::flash_attention))
        return static_cast<int64_t>(at::SDPBackend::overrideable);
    return cpu_choice;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fusedAttention(const at::Tensor &query, const at::Tensor &key, const at::Tensor &value,
               const std::optional<at::Tensor> &attn_bias, double dropout_p, bool is_causal,
               bool return_debug_mask, std::optional<double> scale)
{
    TORCH_CHECK(!return_debug_mask, "torch_hal (backend '", backendName(),
                "'): _scaled_dot_product_fused_attention_overrideable: return_debug_mask is not "
                "supported");
    auto [output, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_bias, scale);
    // The CPU kernel needs no sequence offsets, RNG state or debug mask: empty tensors.
    at::Tensor none = at::empty({ 0 }, query.options());
    at::Tensor no_rng = at::empty({ 0 }, query.options().dtype(at::kLong));
    return { output,           logsumexp, none,   none, query.sym_size(-2),
             key.sym_size(-2), no_rng,    no_rng, none };
}

// The gradient of the additive mask, which the CPU flash kernel does not compute. PyTorch's own
// route never asks for it (a mask that needs a gradient makes the CPU, and so the device, take
// the math path), but the operator's contract has it, and a caller of the backward may want
// it: dS = P * (dP - rowsum(dO * O)), with P the attention weights recomputed from the inputs,
// dP = dO V^T, and dS summed down to the mask's (broadcast) shape. Computed in float32 (double
// for double inputs), as the kernels accumulate.
at::Tensor maskGradient(const at::Tensor &grad_out, const at::Tensor &query, const at::Tensor &key,
                        const at::Tensor &value, const at::Tensor &attn_bias, const at::Tensor &out,
                        bool is_causal, std::optional<double> scale)
{
    TORCH_CHECK(at::isFloatingType(attn_bias.scalar_type()), "torch_hal (backend '", backendName(),
                "'): scaled_dot_product_attention: a derivative for 'attn_mask' ",
                "needs a floating-point mask, not ", attn_bias.scalar_type());
    const auto acc = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor q = query.to(acc), k = key.to(acc), v = value.to(acc);
    if (q.dim() >= 3 && k.size(-3) != q.size(-3)) { // grouped-query attention
        k = k.repeat_interleave(q.size(-3) / k.size(-3), -3);
        v = v.repeat_interleave(q.size(-3) / v.size(-3), -3);
    }
    const double factor = scale.has_value() ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul(factor).add(attn_bias.to(acc));
    if (is_causal) {
        at::Tensor keep = at::ones({ q.size(-2), k.size(-2) }, q.options().dtype(at::kBool)).tril();
        scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
    }
    at::Tensor weights = at::_safe_softmax(scores, -1);
    at::Tensor go = grad_out.to(acc);
    at::Tensor delta = (go * out.to(acc)).sum(-1, /*keepdim=*/true);
    at::Tensor grad_scores = weights * (at::matmul(go, v.transpose(-2, -1)) - delta);
    return grad_scores.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fusedAttentionBackward(
    const at::Tensor &grad_out, const at::Tensor &query, const at::Tensor &key,
    const at::Tensor &value, const at::Tensor &attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor &out, const at::Tensor &logsumexp, const at::Tensor & /*cum_seq_q*/,
    const at::Tensor & /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor & /*philox_seed*/,
    const at::Tensor & /*philox_offset*/, std::optional<double> scale)
{
    const bool want_mask_grad = grad_input_mask[3] && attn_bias.defined();
    // With dropout the weights depend on the forward's random mask, which is not kept.
    TORCH_CHECK_NOT_IMPLEMENTED(!want_mask_grad || dropout_p == 0.0, "torch_hal (backend '",
                                backendName(), "'): scaled_dot_product_attention: the derivative ",
                                "for 'attn_mask' is not implemented with dropout");
    std::optional<at::Tensor> mask;
    if (attn_bias.defined())
        mask = attn_bias;
    auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, mask, scale);
    at::Tensor grad_mask;
    if (want_mask_grad)
        grad_mask = maskGradient(grad_out, query, key, value, attn_bias, out, is_causal, scale);
    return { grad_q, grad_k, grad_v, grad_mask };
}

} // namespace

void registerAttention()
{
    static auto *m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
    // The operator answers what the stub answers (through the fallback, the CPU kernel would
    // see copies without requires_grad, and could choose otherwise).
    m->impl("_fused_sdp_choice", TORCH_FN(fusedSdpChoice));
    m->impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fusedAttention));
    m->impl("_scaled_dot_product_fused_attention_overrideable_backward",
            TORCH_FN(fusedAttentionBackward));
}

} // namespace torch_hal

// A DispatchStub entry is static registration; the stub is only ever asked for PrivateUse1
// tensors, which exist only once the backend opened and registerAll() ran.
namespace at::native
{
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_hal::fusedSdpChoice)
} // namespace at::native
