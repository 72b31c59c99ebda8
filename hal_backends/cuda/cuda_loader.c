/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: finding and loading the CUDA runtime (libcudart) and NCCL (libnccl) with dlopen.
 *
 * Why dlopen rather than linking: the backend library then loads on any machine, and one
 * without a GPU, a driver or NCCL gets a clean HAL status naming what is missing instead of a
 * loader error; and NCCL (hundreds of MB) is only a dependency where it is installed.
 *
 * Neither library is ever unloaded (RTLD_NODELETE): libcudart keeps the device's primary context
 * for as long as it stays loaded (unloading it would recreate the context at every backend open,
 * hundreds of milliseconds each) and registers exit handlers, and NCCL keeps threads and static
 * state that do not survive dlclose.
 *
 * Search order for libcudart: $HAL_CUDA_LIBCUDART (when set, only that file), then
 * libcudart.so.<major> on the dynamic loader's search path, then the conventional toolkit
 * location. For libnccl: $HAL_NCCL_LIBRARY ("none": no NCCL), then the libnccl.so.2 that was
 * beside the nccl.h the backend was built with (HAL_CUDA_NCCL_BUILD_LIBRARY: a wheel's library,
 * e.g. nvidia-nccl-cu13's, is on no loader path and the backend has no rpath), then
 * libnccl.so.2 on the search path, then the toolkit location. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/cuda/cuda_internal.h"

/* Opens one candidate; on failure appends "<file>: <dlerror>" to reasons. */
static void *open_candidate(const char *file, char *reasons, size_t size)
{
    void *dl = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (dl != NULL)
        return dl;
    const char *err = dlerror();
    size_t used = strlen(reasons);
    if (used < size)
        snprintf(reasons + used, size - used, "%s%s", used > 0 ? "; " : "",
                 err != NULL ? err : file);
    return NULL;
}

/* The file a handle was loaded from, for messages. */
static void loaded_path(void *dl, const char *fallback, char *out, size_t size)
{
    struct link_map *map = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL &&
        map->l_name[0] != '\0')
        snprintf(out, size, "%s", map->l_name);
    else
        snprintf(out, size, "%s", fallback);
}

/* Tries $env alone when set, else each of names. Returns the handle or NULL (reasons set). */
static void *open_library(const char *env, const char *const *names, size_t n, char *path,
                          size_t path_size, char *reasons, size_t size)
{
    reasons[0] = '\0';
    const char *chosen = getenv(env);
    if (chosen != NULL && chosen[0] != '\0') {
        void *dl = open_candidate(chosen, reasons, size);
        if (dl != NULL)
            loaded_path(dl, chosen, path, path_size);
        return dl;
    }
    for (size_t i = 0; i < n; i++) {
        if (names[i][0] == '\0') /* a candidate this build does not have */
            continue;
        void *dl = open_candidate(names[i], reasons, size);
        if (dl != NULL) {
            loaded_path(dl, names[i], path, path_size);
            return dl;
        }
    }
    return NULL;
}

/* Resolves the listed symbols into consecutive function-pointer fields starting at first.
 * Returns how many are missing and lists them in missing. */
static size_t resolve(void *dl, const char *prefix, const char *const *names, size_t n,
                      void (**first)(void), char *missing, size_t size)
{
    size_t absent = 0;
    missing[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char sym[128];
        snprintf(sym, sizeof(sym), "%s%s", prefix, names[i]);
        void *p = dlsym(dl, sym);
        /* POSIX: a data pointer converts to a function pointer through memcpy. */
        memcpy(&first[i], &p, sizeof(p));
        if (p == NULL) {
            size_t used = strlen(missing);
            if (used < size)
                snprintf(missing + used, size - used, "%s%s", absent ? ", " : "", sym);
            absent++;
        }
    }
    return absent;
}

#define CUDA_NAME(ret, name, params) #name,
static const char *const rt_names[] = { CUDA_RT_FUNCS(CUDA_NAME) };
#define RT_COUNT (sizeof(rt_names) / sizeof(rt_names[0]))

/* The function-pointer fields of cuda_rt_t are laid out consecutively, in list order. */
_Static_assert(offsetof(cuda_rt_t, LaunchKernelExC) - offsetof(cuda_rt_t, GetDeviceCount) ==
                   (RT_COUNT - 1) * sizeof(void (*)(void)),
               "cuda_rt_t function pointers are not contiguous");

hal_status_t cuda_rt_load(cuda_rt_t *rt, char *msg, size_t size)
{
    memset(rt, 0, sizeof(*rt));
    char soname[32], lib64[64], lib[64];
    snprintf(soname, sizeof(soname), "libcudart.so.%d", CUDA_RT_MAJOR);
    snprintf(lib64, sizeof(lib64), CUDA_DEFAULT_ROOT "/lib64/%s", soname);
    snprintf(lib, sizeof(lib), CUDA_DEFAULT_ROOT "/lib/%s", soname);
    const char *const names[] = { soname, lib64, lib };
    char reasons[1536];
    rt->dl = open_library(CUDA_ENV_LIBCUDART, names, sizeof(names) / sizeof(names[0]), rt->path,
                          sizeof(rt->path), reasons, sizeof(reasons));
    if (rt->dl == NULL) {
        snprintf(msg, size,
                 "cannot load the CUDA runtime (libcudart.so.%d, CUDA %d.x, which this backend was "
                 "built for): %s. Install the CUDA %d toolkit or runtime, or set %s to its "
                 "libcudart.so.%d",
                 CUDA_RT_MAJOR, CUDA_RT_MAJOR, reasons, CUDA_RT_MAJOR, CUDA_ENV_LIBCUDART,
                 CUDA_RT_MAJOR);
        return HAL_ERROR_NOT_FOUND;
    }
    char missing[1024];
    size_t absent = resolve(rt->dl, "cuda", rt_names, RT_COUNT,
                            (void (**)(void)) & rt->GetDeviceCount, missing, sizeof(missing));
    if (absent > 0) {
        snprintf(msg, size, "the CUDA runtime at %s lacks %zu function%s: %s", rt->path, absent,
                 absent == 1 ? "" : "s", missing);
        return HAL_ERROR_NOT_FOUND;
    }
    if (rt->RuntimeGetVersion(&rt->runtime_version) != cudaSuccess)
        rt->runtime_version = 0;
    if (rt->runtime_version / 1000 != CUDA_RT_MAJOR) {
        snprintf(msg, size,
                 "the CUDA runtime at %s is version %d.%d; this backend was built for CUDA %d.x",
                 rt->path, rt->runtime_version / 1000, (rt->runtime_version % 1000) / 10,
                 CUDA_RT_MAJOR);
        return HAL_ERROR_VERSION_MISMATCH;
    }
    /* 0 when no driver is installed; the device count says that more precisely. */
    if (rt->DriverGetVersion(&rt->driver_version) != cudaSuccess)
        rt->driver_version = 0;
    return HAL_OK;
}

#if HAL_CUDA_WITH_NCCL

#define NCCL_NAME(ret, name, params) #name,
static const char *const nccl_names[] = { CUDA_NCCL_FUNCS(NCCL_NAME) };
#define NCCL_COUNT (sizeof(nccl_names) / sizeof(nccl_names[0]))

_Static_assert(offsetof(cuda_nccl_t, GroupEnd) - offsetof(cuda_nccl_t, GetVersion) ==
                   (NCCL_COUNT - 1) * sizeof(void (*)(void)),
               "cuda_nccl_t function pointers are not contiguous");

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static cuda_nccl_t nccl_table;
static const cuda_nccl_t *nccl_loaded;
static char nccl_reason[CUDA_MSG_MAX];

/* Once per process: NCCL is process-wide state, and loading it costs a noticeable fraction of a
 * second. */
static void nccl_load_once(void)
{
    cuda_nccl_t *n = &nccl_table;
    const char *env = getenv(CUDA_ENV_LIBNCCL);
    if (env != NULL && strcmp(env, "none") == 0) {
        snprintf(nccl_reason, sizeof(nccl_reason), "%s=none", CUDA_ENV_LIBNCCL);
        return;
    }
    const char *const names[] = {
        HAL_CUDA_NCCL_BUILD_LIBRARY,
        "libnccl.so.2",
        CUDA_DEFAULT_ROOT "/lib64/libnccl.so.2",
        CUDA_DEFAULT_ROOT "/lib/libnccl.so.2",
    };
    char reasons[1536];
    n->dl = open_library(CUDA_ENV_LIBNCCL, names, sizeof(names) / sizeof(names[0]), n->path,
                         sizeof(n->path), reasons, sizeof(reasons));
    if (n->dl == NULL) {
        snprintf(nccl_reason, sizeof(nccl_reason),
                 "cannot load NCCL (libnccl.so.2): %.400s; set %s to its path", reasons,
                 CUDA_ENV_LIBNCCL);
        return;
    }
    char missing[1024];
    size_t absent = resolve(n->dl, "nccl", nccl_names, NCCL_COUNT,
                            (void (**)(void)) & n->GetVersion, missing, sizeof(missing));
    if (absent > 0) {
        snprintf(nccl_reason, sizeof(nccl_reason), "NCCL at %.200s lacks %zu function%s: %.200s",
                 n->path, absent, absent == 1 ? "" : "s", missing);
        return;
    }
    void *a2a = dlsym(n->dl, "ncclAlltoAll");
    memcpy(&n->AlltoAll, &a2a, sizeof(a2a));
    if (n->GetVersion(&n->version) != ncclSuccess) {
        snprintf(nccl_reason, sizeof(nccl_reason), "ncclGetVersion failed (NCCL at %.200s)",
                 n->path);
        return;
    }
    nccl_loaded = n;
}

const cuda_nccl_t *cuda_nccl_load(char *msg, size_t size)
{
    pthread_once(&nccl_once, nccl_load_once);
    if (nccl_loaded == NULL)
        snprintf(msg, size, "%s", nccl_reason);
    return nccl_loaded;
}

#endif /* HAL_CUDA_WITH_NCCL */
