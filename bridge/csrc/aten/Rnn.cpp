// SPDX-License-Identifier: Apache-2.0
// The fused LSTM and GRU cells. PyTorch sends every device but the CPU to these operators
// (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell), and only CUDA implements them, so without these
// kernels the fallback has no CPU kernel to run. They compute the cell from ATen operators on
// the device's tensors (each of which runs like any other device operator), with CUDA's
// formulas and CUDA's workspace layout, so the backward kernels see what CUDA's would.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "runtime/Register.h"

namespace torch_hal
{
namespace
{

void checkGates(const at::Tensor &gates, int64_t chunks, const at::Tensor &state, const char *op)
{
    TORCH_CHECK(gates.dim() == 2 && state.dim() == 2 && gates.size(0) == state.size(0) &&
                    gates.size(1) == chunks * state.size(1),
                op, ": expected gates of shape [batch, ", chunks,
                " * hidden] and a state of shape [batch, hidden], got gates ", gates.sizes(),
                " and state ", state.sizes());
}

at::Tensor withBiases(const at::Tensor &gates, const std::optional<at::Tensor> &bias_a,
                      const std::optional<at::Tensor> &bias_b)
{
    at::Tensor out = gates;
    if (bias_a.has_value() && bias_a->defined())
        out = out + *bias_a;
    if (bias_b.has_value() && bias_b->defined())
        out = out + *bias_b;
    return out;
}

// ---- LSTM -----------------------------------------------------------------------------------

// Returns (hy, cy, workspace); the workspace holds the four activated gates [i, f, g, o].
std::tuple<at::Tensor, at::Tensor, at::Tensor>
fusedLstmCell(const at::Tensor &input_gates, const at::Tensor &hidden_gates, const at::Tensor &cx,
              const std::optional<at::Tensor> &input_bias,
              const std::optional<at::Tensor> &hidden_bias)
{
    checkGates(input_gates, 4, cx, "_thnn_fused_lstm_cell");
    TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(),
                "_thnn_fused_lstm_cell: input and hidden gates differ in shape: ",
                input_gates.sizes(), " vs ", hidden_gates.sizes());
    auto gates = withBiases(input_gates + hidden_gates, input_bias, hidden_bias).chunk(4, 1);
    at::Tensor ig = gates[0].sigmoid();
    at::Tensor fg = gates[1].sigmoid();
    at::Tensor cg = gates[2].tanh();
    at::Tensor og = gates[3].sigmoid();
    at::Tensor cy = fg * cx + ig * cg;
    at::Tensor hy = og * cy.tanh();
    return { hy, cy, at::cat({ ig, fg, cg, og }, 1) };
}

// Returns (grad_gates, grad_cx, grad_bias); an undefined grad_hy or grad_cy is zero.
std::tuple<at::Tensor, at::Tensor, at::Tensor>
fusedLstmCellBackward(const std::optional<at::Tensor> &grad_hy_opt,
                      const std::optional<at::Tensor> &grad_cy_opt, const at::Tensor &cx,
                      const at::Tensor &cy, const at::Tensor &workspace, bool has_bias)
{
    checkGates(workspace, 4, cx, "_thnn_fused_lstm_cell_backward_impl");
    bool has_grad_hy = grad_hy_opt.has_value() && grad_hy_opt->defined();
    bool has_grad_cy = grad_cy_opt.has_value() && grad_cy_opt->defined();
    if (!has_grad_hy && !has_grad_cy)
        return { at::Tensor(), at::Tensor(), at::Tensor() };
    at::Tensor grad_hy = has_grad_hy ? *grad_hy_opt : at::zeros_like(cx);
    auto gates = workspace.chunk(4, 1);
    const at::Tensor &ig = gates[0], &fg = gates[1], &cg = gates[2], &og = gates[3];

    at::Tensor tanh_cy = cy.tanh();
    at::Tensor grad_og = grad_hy * tanh_cy * (1 - og) * og;
    at::Tensor grad_c = grad_hy * og * (1 - tanh_cy * tanh_cy);
    if (has_grad_cy)
        grad_c = grad_c + *grad_cy_opt;
    at::Tensor grad_ig = grad_c * cg * (1 - ig) * ig;
    at::Tensor grad_fg = grad_c * cx * (1 - fg) * fg;
    at::Tensor grad_cg = grad_c * ig * (1 - cg * cg);
    at::Tensor grad_gates = at::cat({ grad_ig, grad_fg, grad_cg, grad_og }, 1);
    at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
    return { grad_gates, grad_c * fg, grad_bias };
}

// ---- GRU ------------------------------------------------------------------------------------

// Returns (hy, workspace); the workspace holds [r, z, n, hx, hn] (hn with its bias).
std::tuple<at::Tensor, at::Tensor> fusedGruCell(const at::Tensor &input_gates,
                                                const at::Tensor &hidden_gates,
                                                const at::Tensor &hx,
                                                const std::optional<at::Tensor> &input_bias,
                                                const std::optional<at::Tensor> &hidden_bias)
{
    checkGates(input_gates, 3, hx, "_thnn_fused_gru_cell");
    TORCH_CHECK(input_gates.sizes() == hidden_gates.sizes(),
                "_thnn_fused_gru_cell: input and hidden gates differ in shape: ",
                input_gates.sizes(), " vs ", hidden_gates.sizes());
    auto in = withBiases(input_gates, input_bias, std::nullopt).chunk(3, 1);
    auto hid = withBiases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
    at::Tensor rg = (in[0] + hid[0]).sigmoid();
    at::Tensor zg = (in[1] + hid[1]).sigmoid();
    at::Tensor ng = (in[2] + rg * hid[2]).tanh();
    at::Tensor hy = ng + zg * (hx - ng);
    return { hy, at::cat({ rg, zg, ng, hx, hid[2] }, 1) };
}

// Returns (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fusedGruCellBackward(const at::Tensor &grad_hy, const at::Tensor &workspace, bool has_bias)
{
    checkGates(workspace, 5, grad_hy, "_thnn_fused_gru_cell_backward");
    auto parts = workspace.chunk(5, 1);
    const at::Tensor &rg = parts[0], &zg = parts[1], &ng = parts[2], &hx = parts[3], &hn = parts[4];
    at::Tensor grad_zg = grad_hy * (hx - ng) * (1 - zg) * zg;
    at::Tensor grad_hx = grad_hy * zg;
    at::Tensor grad_in = grad_hy * (1 - zg) * (1 - ng * ng);
    at::Tensor grad_hn = grad_in * rg;
    at::Tensor grad_rg = grad_in * hn * (1 - rg) * rg;
    at::Tensor grad_input_gates = at::cat({ grad_rg, grad_zg, grad_in }, 1);
    at::Tensor grad_hidden_gates = at::cat({ grad_rg, grad_zg, grad_hn }, 1);
    at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
    at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
    return { grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias };
}

} // namespace

void registerRnnCells()
{
    static auto *m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
    m->impl("_thnn_fused_lstm_cell", TORCH_FN(fusedLstmCell));
    m->impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fusedLstmCellBackward));
    m->impl("_thnn_fused_gru_cell", TORCH_FN(fusedGruCell));
    m->impl("_thnn_fused_gru_cell_backward", TORCH_FN(fusedGruCellBackward));
}

} // namespace torch_hal
