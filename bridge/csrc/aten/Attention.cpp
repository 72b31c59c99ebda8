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
// other operator, so attention on the device is bit for bit what it is on the CPU. Their outputs
// take the sizes, strides and dtypes the operators' meta kernels declare (torch.compile checks
// them; tests/test_fake_crossref.py compares them).
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

// The strides at::empty_like (memory format preserved) gives a tensor like `t`: its own where it
// is dense and non-overlapping, else dense ones in its dimension order.
std::vector<int64_t> stridesOfEmptyLike(const at::Tensor &t)
{
    if (t.is_non_overlapping_and_dense())
        return t.strides().vec();
    return at::infer_dense_strides(t.sizes(), t.strides());
}

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

// The strides the operator's meta kernel promises for the output (alloc_with_matching_layout
// in torch/_meta_registrations.py): the query's own when the shapes agree (empty_like), else
// the query's dimension order (a stable sort by stride, largest first) packed densely.
std::vector<int64_t> stridesMatchingQuery(const at::Tensor &query, at::IntArrayRef shape)
{
    if (query.sizes() == shape)
        return stridesOfEmptyLike(query);
    std::vector<int64_t> order(query.dim());
    for (int64_t d = 0; d < query.dim(); ++d)
        order[d] = d;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return query.stride(a) > query.stride(b); });
    std::vector<int64_t> strides(query.dim());
    int64_t stride = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        strides[*it] = stride;
        stride *= shape[*it];
    }
    return strides;
}

// `result` itself where it already has the given strides, else a copy with them. The CPU kernels
// choose their own layouts; compiled code checks the ones the meta kernels promise.
at::Tensor withStrides(const at::Tensor &result, at::IntArrayRef strides)
{
    if (result.strides() == strides)
        return result;
    return at::empty_strided(result.sizes(), strides, result.options()).copy_(result);
}

// Returns what the meta kernel declares: the output in the query's layout, the logsumexp as a
// contiguous float [B, H, S_q], no sequence offsets or debug mask (undefined), the sequence
// lengths and a 0-dim RNG seed and offset (unused: the CPU kernel has no dropout state).
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
    std::vector<int64_t> out_shape = query.sizes().vec();
    out_shape.back() = value.size(-1);
    output = withStrides(output, stridesMatchingQuery(query, out_shape));
    // Float, as declared (the CPU kernel's is double for double inputs: the backward then
    // recomputes it, see fusedAttentionBackward).
    logsumexp = logsumexp.to(at::kFloat).contiguous();
    // Two tensors: outputs that alias each other where the fake kernel's do not would be
    // another mismatch.
    at::Tensor no_seed = at::empty({}, query.options().dtype(at::kLong));
    at::Tensor no_offset = at::empty({}, query.options().dtype(at::kLong));
    return { output,           logsumexp, at::Tensor(), at::Tensor(), query.sym_size(-2),
             key.sym_size(-2), no_seed,   no_offset,    at::Tensor() };
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
    // The CPU kernel takes the logsumexp in its accumulation type. For double inputs that is
    // double, and the forward returned it rounded to the declared float: the exact one comes
    // from the forward again (deterministic without dropout, which the CPU kernel refuses), so
    // double gradients stay bit for bit the CPU's at the cost of a forward.
    at::Tensor lse = logsumexp;
    if (query.scalar_type() == at::kDouble)
        lse = std::get<1>(at::_scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, mask, scale));
    auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, lse, dropout_p, is_causal, mask, scale);
    // The meta kernel declares each gradient empty_like its input.
    grad_q = withStrides(grad_q, stridesOfEmptyLike(query));
    grad_k = withStrides(grad_k, stridesOfEmptyLike(key));
    grad_v = withStrides(grad_v, stridesOfEmptyLike(value));
    // The meta kernel declares a mask gradient whenever there is a mask; autograd ignores it
    // where it did not ask for it, so that one is left unwritten, as empty_like leaves it.
    at::Tensor grad_mask;
    if (want_mask_grad)
        grad_mask =
            withStrides(maskGradient(grad_out, query, key, value, attn_bias, out, is_causal, scale),
                        stridesOfEmptyLike(attn_bias));
    else if (attn_bias.defined())
        grad_mask = at::empty_like(attn_bias);
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
