// SPDX-License-Identifier: Apache-2.0
// The torch_hal process group's errors (torch.distributed.DistBackendError naming the HAL
// status and message) and tensors: the checks every collective makes, the HAL dtype and
// reduce op of a tensor, and how a tensor is handed to a HAL call.
#include "distributed/ProcessGroupHALInternal.h"

#include <ATen/core/jit_type.h>

#include "runtime/Allocator.h"

namespace torch_hal
{

// ---- Errors -----------------------------------------------------------------------------------

c10::DistBackendError distError(const std::string &message)
{
    return c10::DistBackendError(
        c10::SourceLocation{ __func__, __FILE__, static_cast<uint32_t>(__LINE__) }, message);
}

[[noreturn]] void throwDist(const std::string &message)
{
    throw distError(message);
}

[[noreturn]] void notImplemented(const std::string &message)
{
    C10_THROW_ERROR(NotImplementedError, message);
}

// A failed HAL call of the process group: torch.distributed.DistBackendError naming the HAL
// status, the call and hal_last_error_message().
void checkComm(hal_status_t status, const char *call)
{
    if (C10_UNLIKELY(status != HAL_OK))
        throwDist(halErrorMessage(status, call));
}

// ---- Tensors ------------------------------------------------------------------------------------

void checkDeviceTensor(const at::Tensor &t, const char *what)
{
    TORCH_CHECK_VALUE(t.defined(), "torch_hal process group: ", what, " is undefined");
    TORCH_CHECK_VALUE(t.device().type() == kDeviceType, "torch_hal process group: ", what,
                      " must be a ", deviceTypeName(), " tensor, got a tensor on ", t.device(),
                      " (the process group serves only ", deviceTypeName(),
                      " tensors; use 'cpu:gloo,", deviceTypeName(),
                      ":torch_hal' as the backend for CPU tensors too)");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "torch_hal process group: ", what,
                      " must be a strided (dense) tensor, got layout ", t.layout());
}

// Element-wise collectives only need the elements to fill their storage range.
void checkDense(const at::Tensor &t, const char *what)
{
    checkDeviceTensor(t, what);
    TORCH_CHECK_VALUE(t.is_non_overlapping_and_dense(), "torch_hal process group: ", what,
                      " must be dense (non-overlapping, no gaps); call .contiguous() first");
}

void checkContiguous(const at::Tensor &t, const char *what)
{
    checkDeviceTensor(t, what);
    TORCH_CHECK_VALUE(t.is_contiguous(), "torch_hal process group: ", what,
                      " must be contiguous; call .contiguous() first");
}

void checkSameDevice(const at::Tensor &t, c10::Device device, const char *what)
{
    TORCH_CHECK_VALUE(t.device() == device, "torch_hal process group: all tensors must be on ",
                      device, ", but ", what, " is on ", t.device());
}

void checkSingle(const std::vector<at::Tensor> &tensors, const char *op)
{
    TORCH_CHECK_VALUE(tensors.size() == 1, "torch_hal process group: ", op,
                      " takes exactly one tensor per rank, got ", tensors.size());
}

std::optional<hal_dtype_t> halDtype(at::ScalarType type)
{
    switch (type) {
    case at::kChar:
        return HAL_DTYPE_I8;
    case at::kByte:
    case at::kBool:
        return HAL_DTYPE_U8;
    case at::kInt:
        return HAL_DTYPE_I32;
    case at::kUInt32:
        return HAL_DTYPE_U32;
    case at::kLong:
        return HAL_DTYPE_I64;
    case at::kUInt64:
        return HAL_DTYPE_U64;
    case at::kHalf:
        return HAL_DTYPE_F16;
    case at::kFloat:
        return HAL_DTYPE_F32;
    case at::kDouble:
        return HAL_DTYPE_F64;
    case at::kBFloat16:
        return HAL_DTYPE_BF16;
    case at::kFloat8_e4m3fn:
        return HAL_DTYPE_F8_E4M3;
    case at::kFloat8_e5m2:
        return HAL_DTYPE_F8_E5M2;
    default:
        return std::nullopt;
    }
}

// Data movement (broadcast, gathers, all-to-all, point to point): any dtype; one the HAL has
// no type for moves as bytes. FP8 also moves as bytes (no backend capability needed).
Payload movePayload(const at::Tensor &t)
{
    std::optional<hal_dtype_t> dtype = halDtype(t.scalar_type());
    if (dtype && *dtype != HAL_DTYPE_F8_E4M3 && *dtype != HAL_DTYPE_F8_E5M2)
        return { t.data_ptr(), static_cast<size_t>(t.numel()), *dtype };
    return { t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), HAL_DTYPE_U8 };
}

// Reductions: the element type must be one the HAL reduces.
Payload reducePayload(const at::Tensor &t)
{
    std::optional<hal_dtype_t> dtype = halDtype(t.scalar_type());
    TORCH_CHECK_VALUE(dtype.has_value(), "torch_hal process group: reductions do not support ",
                      t.scalar_type(),
                      " tensors (supported: int8, uint8, bool, int32, uint32, int64, uint64, "
                      "float16, bfloat16, float32, float64, and float8 where the device has "
                      "HAL_DEVICE_CAP_FP8_COLLECTIVES)");
    return { t.data_ptr(), static_cast<size_t>(t.numel()), *dtype };
}

hal_redop_t halRedop(const c10d::ReduceOp &op, at::ScalarType type)
{
    const bool boolean = type == at::kBool;
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
        return boolean ? HAL_REDOP_MAX : HAL_REDOP_SUM; // logical or, as NCCL does
    case c10d::ReduceOp::PRODUCT:
        return boolean ? HAL_REDOP_MIN : HAL_REDOP_PROD; // logical and
    case c10d::ReduceOp::MIN:
        return HAL_REDOP_MIN;
    case c10d::ReduceOp::MAX:
        return HAL_REDOP_MAX;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK_VALUE(!boolean,
                          "torch_hal process group: ReduceOp.AVG is not defined for bool tensors");
        return HAL_REDOP_AVG;
    case c10d::ReduceOp::PREMUL_SUM:
        notImplemented("torch_hal process group: ReduceOp.PREMUL_SUM is not supported (the HAL "
                       "reduces with SUM, PROD, MIN, MAX and AVG); multiply the tensor by the "
                       "factor and use ReduceOp.SUM");
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        notImplemented("torch_hal process group: bitwise reductions (BAND, BOR, BXOR) are not "
                       "supported by the HAL");
    default:
        notImplemented("torch_hal process group: unsupported reduce op " +
                       std::to_string(static_cast<int>(op.op_)));
    }
}

// Complex tensors reduce as their real views for the element-wise sums (as torch does).
at::Tensor reducible(const at::Tensor &t, const c10d::ReduceOp &op)
{
    if (!t.is_complex())
        return t;
    TORCH_CHECK_VALUE(c10d::isComplexViewAsRealAllowed(op),
                      "torch_hal process group: this reduce op is not supported on complex "
                      "tensors (only SUM and AVG are)");
    return at::view_as_real(t);
}

// Marks a device tensor's memory as used by the communication stream, so that the caching
// allocator does not hand it out again before the collective is done with it.
void recordOnStream(const at::Tensor &t, const c10::Stream &stream)
{
    if (t.defined() && t.has_storage() && t.device().type() == kDeviceType)
        recordDeviceBlockOnStream(t.storage().data_ptr(), stream);
}

c10::intrusive_ptr<c10::ivalue::Future> makeFuture(c10::Device device)
{
    return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                    std::vector<c10::Device>{ device });
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>> &lists)
{
    std::vector<at::Tensor> out;
    for (const auto &list : lists)
        out.insert(out.end(), list.begin(), list.end());
    return out;
}

} // namespace torch_hal
