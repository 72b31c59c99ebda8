/* SPDX-License-Identifier: Apache-2.0 */
/* Element sizes of the HAL's dtypes: the collectives' types and the program-only ones (bool, i16,
 * u16), for the collectives' checks and the program API's tensor arguments. */
#include "hal/src/core.h"

size_t hal_dtype_bytes(hal_dtype_t dtype)
{
    switch (dtype) {
    case HAL_DTYPE_I8:
    case HAL_DTYPE_U8:
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2:
    case HAL_DTYPE_BOOL:
        return 1;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16:
    case HAL_DTYPE_I16:
    case HAL_DTYPE_U16:
        return 2;
    case HAL_DTYPE_I32:
    case HAL_DTYPE_U32:
    case HAL_DTYPE_F32:
        return 4;
    case HAL_DTYPE_I64:
    case HAL_DTYPE_U64:
    case HAL_DTYPE_F64:
        return 8;
    default:
        return 0;
    }
}
