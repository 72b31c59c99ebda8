/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend internals that need no GPU and no CUDA library: the CUDA and NCCL status
 * mappings, messages, the translation of a filled cudaDeviceProp into HAL properties, the
 * IPC handle room check, and the whole-image check of cubins and fatbins (on the images nvcc
 * built for the conformance suite). */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"
#include "tools/ctest/ctest.h"

CTEST(CudaUnit, StatusMapping)
{
    static const struct {
        cudaError_t err;
        cuda_op_t op;
        hal_status_t want;
    } cases[] = {
        { cudaSuccess, CUDA_OP_OTHER, HAL_OK },
        { cudaErrorNotReady, CUDA_OP_OTHER, HAL_NOT_READY },
        { cudaErrorMemoryAllocation, CUDA_OP_ALLOC_DEVICE, HAL_ERROR_OUT_OF_DEVICE_MEMORY },
        { cudaErrorMemoryAllocation, CUDA_OP_ALLOC_HOST, HAL_ERROR_OUT_OF_HOST_MEMORY },
        { cudaErrorMemoryAllocation, CUDA_OP_OTHER, HAL_ERROR_OUT_OF_DEVICE_MEMORY },
        { cudaErrorInvalidValue, CUDA_OP_OTHER, HAL_ERROR_INVALID_ARGUMENT },
        { cudaErrorInvalidDevicePointer, CUDA_OP_OTHER, HAL_ERROR_INVALID_ARGUMENT },
        { cudaErrorInvalidDevice, CUDA_OP_OTHER, HAL_ERROR_INVALID_ARGUMENT },
        { cudaErrorInvalidResourceHandle, CUDA_OP_OTHER, HAL_ERROR_INVALID_HANDLE },
        /* No device or driver: the backend has nothing to offer. */
        { cudaErrorNoDevice, CUDA_OP_INIT, HAL_ERROR_NOT_FOUND },
        { cudaErrorInsufficientDriver, CUDA_OP_INIT, HAL_ERROR_NOT_FOUND },
        { cudaErrorSystemDriverMismatch, CUDA_OP_INIT, HAL_ERROR_NOT_FOUND },
        { cudaErrorInitializationError, CUDA_OP_INIT, HAL_ERROR_NOT_FOUND },
        { cudaErrorInitializationError, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        /* Device faults are sticky: the device is lost. */
        { cudaErrorIllegalAddress, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorLaunchFailure, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorECCUncorrectable, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorHardwareStackError, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorIllegalInstruction, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorMisalignedAddress, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorAssert, CUDA_OP_OTHER, HAL_ERROR_DEVICE_LOST },
        { cudaErrorLaunchTimeout, CUDA_OP_ALLOC_DEVICE, HAL_ERROR_DEVICE_LOST },
        { cudaErrorDevicesUnavailable, CUDA_OP_INIT, HAL_ERROR_BUSY },
        { cudaErrorNotSupported, CUDA_OP_OTHER, HAL_ERROR_UNSUPPORTED },
        { cudaErrorNotPermitted, CUDA_OP_OTHER, HAL_ERROR_PERMISSION_DENIED },
        { cudaErrorTimeout, CUDA_OP_OTHER, HAL_ERROR_TIMEOUT },
        { cudaErrorUnknown, CUDA_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
        { (cudaError_t)54321, CUDA_OP_OTHER, HAL_ERROR_BACKEND_SPECIFIC },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hal_status_t got = cuda_status_of(cases[i].err, cases[i].op);
        if (got != cases[i].want)
            fprintf(stderr, "cudaError %d (op %d): %s, expected %s\n", (int)cases[i].err,
                    (int)cases[i].op, hal_status_string(got), hal_status_string(cases[i].want));
        CTEST_CHECK(got == cases[i].want);
    }
    CTEST_CHECK(cuda_error_is_sticky(cudaErrorIllegalAddress));
    CTEST_CHECK(!cuda_error_is_sticky(cudaErrorMemoryAllocation));
    CTEST_CHECK(!cuda_error_is_sticky(cudaErrorNotReady));
    CTEST_CHECK(!cuda_error_is_sticky(cudaErrorInvalidValue));
    return CTEST_PASS;
}

CTEST(CudaUnit, NcclStatusMapping)
{
    static const struct {
        int result;
        hal_status_t want;
    } cases[] = {
        { 0, HAL_OK },                     /* ncclSuccess */
        { 1, HAL_ERROR_BACKEND_SPECIFIC }, /* ncclUnhandledCudaError */
        { 2, HAL_ERROR_BACKEND_SPECIFIC }, /* ncclSystemError */
        { 3, HAL_ERROR_INTERNAL },         /* ncclInternalError */
        { 4, HAL_ERROR_INVALID_ARGUMENT }, /* ncclInvalidArgument */
        { 5, HAL_ERROR_INVALID_ARGUMENT }, /* ncclInvalidUsage */
        { 6, HAL_ERROR_REMOTE },           /* ncclRemoteError */
        { 7, HAL_IN_PROGRESS },            /* ncclInProgress */
        { 8, HAL_ERROR_TIMEOUT },          /* ncclTimeout */
        { 99, HAL_ERROR_BACKEND_SPECIFIC },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CTEST_CHECK(cuda_nccl_status_of(cases[i].result) == cases[i].want);
#if HAL_CUDA_WITH_NCCL
    CTEST_CHECK(cuda_nccl_status_of(ncclRemoteError) == HAL_ERROR_REMOTE);
    CTEST_CHECK(cuda_nccl_status_of(ncclInvalidUsage) == HAL_ERROR_INVALID_ARGUMENT);
#endif
    return CTEST_PASS;
}

/* Without a loaded runtime the text still names the number. */
CTEST(CudaUnit, ErrorTextWithoutRuntime)
{
    char buf[128];
    cuda_error_text(NULL, cudaErrorInsufficientDriver, buf, sizeof(buf));
    CTEST_CHECK(strcmp(buf, "CUDA error 35") == 0);
    return CTEST_PASS;
}

static struct cudaDeviceProp h200_like(void)
{
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "NVIDIA H200");
    p.totalGlobalMem = (size_t)150754820096ull;
    p.major = 9;
    p.minor = 0;
    p.managedMemory = 1;
    p.concurrentManagedAccess = 1;
    p.unifiedAddressing = 1;
    return p;
}

CTEST(CudaUnit, PropertiesFromCuda)
{
    struct cudaDeviceProp p = h200_like();
    cuda_device_facts_t facts = {
        .index = 3, .priority_least = 0, .priority_greatest = -5, .ipc = true, .nccl_version = 22803
    };
    hal_device_properties_t props;
    memset(&props, 0xab, sizeof(props));
    props.struct_size = sizeof(props);
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK(strcmp(props.name, "NVIDIA H200") == 0);
    CTEST_CHECK(strcmp(props.vendor, "NVIDIA") == 0);
    CTEST_CHECK(props.index == 3);
    CTEST_CHECK(props.host_addressable == 0);
    CTEST_CHECK(props.total_memory == 150754820096ull);
    CTEST_CHECK(props.stream_priority_least == 0 && props.stream_priority_greatest == -5);
    CTEST_CHECK(props.alignment == 256);
    const uint64_t always = HAL_DEVICE_CAP_TIMING_EVENTS | HAL_DEVICE_CAP_HOST_CALLBACKS |
                            HAL_DEVICE_CAP_PEER_COPY | HAL_DEVICE_CAP_STREAM_FREE;
    CTEST_CHECK((props.capabilities & always) == always);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_IPC);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_PROGRAMS);
    CTEST_CHECK(props.program_formats ==
                ((1u << HAL_PROGRAM_FORMAT_PTX) | (1u << HAL_PROGRAM_FORMAT_CUBIN) |
                 (1u << HAL_PROGRAM_FORMAT_FATBIN)));

    /* Without concurrent managed access there is no shared kind; without NCCL no native (and no
     * fp8) collectives; NCCL before 2.24, or a GPU before Hopper, has no fp8. */
    p.concurrentManagedAccess = 0;
    facts.ipc = false;
    facts.nccl_version = 0;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) == 0);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_IPC) == 0);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES) == 0);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) == 0);
    CTEST_CHECK((props.capabilities & always) == always);
    facts.nccl_version = 22304;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_NATIVE_COLLECTIVES);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) == 0);
    facts.nccl_version = 22400;
    p.major = 8;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES) == 0);
    p.major = 9;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK(props.capabilities & HAL_DEVICE_CAP_FP8_COLLECTIVES);
    p.managedMemory = 0;
    p.concurrentManagedAccess = 1;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK((props.capabilities & HAL_DEVICE_CAP_SHARED_MEMORY) == 0);
    return CTEST_PASS;
}

/* A 255-character name (CUDA's limit) survives; the struct's own fields are left alone. */
CTEST(CudaUnit, PropertiesLongName)
{
    struct cudaDeviceProp p = h200_like();
    memset(p.name, 'x', sizeof(p.name) - 1);
    p.name[sizeof(p.name) - 1] = '\0';
    cuda_device_facts_t facts = { .index = 0 };
    hal_device_properties_t props = HAL_DEVICE_PROPERTIES_INIT;
    props.next = &facts;
    cuda_props_from_cuda(&p, &facts, &props);
    CTEST_CHECK(strlen(props.name) == sizeof(p.name) - 1);
    CTEST_CHECK(props.struct_size == sizeof(props) && props.next == &facts);
    return CTEST_PASS;
}

CTEST(CudaUnit, IpcHandleRoom)
{
    cudaIpcMemHandle_t h;
    memset(&h, 0, sizeof(h));
    memset(&h, 0x5a, 40); /* what CUDA fills */
    CTEST_CHECK(cuda_ipc_handle_fits(&h));
    ((unsigned char *)&h)[40] = 1;
    CTEST_CHECK(!cuda_ipc_handle_fits(&h));
    memset(&h, 0x5a, sizeof(h));
    CTEST_CHECK(!cuda_ipc_handle_fits(&h));
    return CTEST_PASS;
}

/* The bytes of the image named by an environment variable (set by the BUILD file), or NULL. */
static unsigned char *read_image(const char *env, size_t *size)
{
    const char *path = getenv(env);
    FILE *f = path != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        fprintf(stderr, "cannot open %s=%s\n", env, path != NULL ? path : "(unset)");
        return NULL;
    }
    unsigned char *buf = malloc(1 << 20);
    *size = buf != NULL ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

CTEST(CudaUnit, FatbinWholeImageCheck)
{
    size_t size = 0;
    unsigned char *image = read_image("CUDA_TEST_FATBIN", &size);
    CTEST_CHECK(image != NULL && size > 16);
    char msg[256];
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_FATBIN, image, size, msg, sizeof(msg)) ==
                HAL_OK);
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_FATBIN, image, size - 1, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "declares") != NULL);
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_FATBIN, image, 8, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    image[0] ^= 0xff;
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_FATBIN, image, size, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "not a fatbin") != NULL);
    /* A size field that wraps around. */
    image[0] ^= 0xff;
    memset(image + 8, 0xff, 8);
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_FATBIN, image, size, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    free(image);
    return CTEST_PASS;
}

CTEST(CudaUnit, CubinWholeImageCheck)
{
    size_t size = 0;
    unsigned char *image = read_image("CUDA_TEST_CUBIN", &size);
    CTEST_CHECK(image != NULL && size > sizeof(Elf64_Ehdr));
    char msg[256];
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_CUBIN, image, size, msg, sizeof(msg)) ==
                HAL_OK);
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_CUBIN, image, size / 2, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "declares") != NULL);
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_CUBIN, image, 16, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    image[EI_CLASS] = ELFCLASS32;
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_CUBIN, image, size, msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    static const char text[] = "not a cubin at all, only some text that is long enough";
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_CUBIN, text, sizeof(text), msg, sizeof(msg)) ==
                HAL_ERROR_INVALID_ARGUMENT);
    CTEST_CHECK(strstr(msg, "no ELF header") != NULL);
    /* PTX is left to the runtime's compiler. */
    CTEST_CHECK(cuda_image_check(HAL_PROGRAM_FORMAT_PTX, text, 4, msg, sizeof(msg)) == HAL_OK);
    free(image);
    return CTEST_PASS;
}
