/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: finding and loading the Neuron runtime (libnrt.so.1) with dlopen and
 * resolving the functions the backend calls. Nothing is linked against libnrt, so the backend
 * loads on any machine and says precisely what is missing where the runtime is absent or too
 * old.
 *
 * Search order: $HAL_NEURON_LIBNRT (a file path; when set, nothing else is tried, so a typo
 * fails loudly instead of silently picking up another runtime), then the path the
 * aws-neuronx-runtime-lib package installs to, then the dynamic loader's search path, and last a
 * libnrt.so.1 in the backend library's own directory (where a package that cannot count on the
 * Neuron runtime, such as the PyTorch bridge's, ships the libnrt emulator;
 * HAL_NEURON_BUNDLED_LIBNRT=0 turns this off). */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

typedef struct trn_nrt_symbol {
    const char *name;
    size_t offset; /* of the function pointer in trn_nrt_t */
} trn_nrt_symbol_t;

/* The entry resolving `symbol` into `field`. The field must point to the symbol's function type
 * from nrt_abi.h (symbol##_fn): the unevaluated comparison of the two pointer types does not
 * compile when they differ (distinct pointer types, an error with -Werror). */
#define TRN_SYM(field, symbol)                                                                     \
    {                                                                                              \
        .name = #symbol, .offset = offsetof(trn_nrt_t, field) +                                    \
                                   0 * sizeof(&((trn_nrt_t *)NULL)->field == (symbol##_fn **)NULL) \
    }

static const trn_nrt_symbol_t trn_nrt_symbols[] = {
    TRN_SYM(get_status_as_str, nrt_get_status_as_str),
    TRN_SYM(init, nrt_init),
    TRN_SYM(close, nrt_close),
    TRN_SYM(get_instance_info, nrt_get_instance_info),
    TRN_SYM(get_visible_vnc_count, nrt_get_visible_vnc_count),
    TRN_SYM(get_total_vnc_count, nrt_get_total_vnc_count),
    TRN_SYM(get_vnc_memory_stats, nrt_get_vnc_memory_stats),
    TRN_SYM(tensor_allocate, nrt_tensor_allocate),
    TRN_SYM(tensor_allocate_slice, nrt_tensor_allocate_slice),
    TRN_SYM(tensor_free, nrt_tensor_free),
    TRN_SYM(tensor_get_va, nrt_tensor_get_va),
    TRN_SYM(tensor_read, nrt_tensor_read),
    TRN_SYM(tensor_write, nrt_tensor_write),
    TRN_SYM(tensor_copy, nrt_tensor_copy),
    TRN_SYM(tensor_memset, nrt_tensor_memset),
    TRN_SYM(allocate_tensor_set, nrt_allocate_tensor_set),
    TRN_SYM(destroy_tensor_set, nrt_destroy_tensor_set),
    TRN_SYM(add_tensor_to_tensor_set, nrt_add_tensor_to_tensor_set),
    TRN_SYM(load, nrt_load),
    TRN_SYM(unload, nrt_unload),
    TRN_SYM(execute, nrt_execute),
    TRN_SYM(get_model_tensor_info, nrt_get_model_tensor_info),
    TRN_SYM(free_model_tensor_info, nrt_free_model_tensor_info),
};

#define TRN_NRT_SYMBOL_COUNT (sizeof(trn_nrt_symbols) / sizeof(trn_nrt_symbols[0]))

/* Opens one candidate. On failure appends "<what>: <dlerror>" to the reasons. */
static void *open_candidate(const char *file, const char *what, char *reasons, size_t size)
{
    void *dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (dl != NULL)
        return dl;
    const char *err = dlerror();
    size_t used = strlen(reasons);
    if (used < size)
        snprintf(reasons + used, size - used, "%s%s: %s", used > 0 ? "; " : "", what,
                 err != NULL ? err : "dlopen failed");
    return NULL;
}

/* Where the dynamic loader found a library opened by SONAME. */
static void loaded_path(void *dl, const char *fallback, char *out, size_t size)
{
    struct link_map *map = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL &&
        map->l_name[0] != '\0')
        snprintf(out, size, "%s", map->l_name);
    else
        snprintf(out, size, "%s", fallback);
}

/* The libnrt.so.1 next to this backend library, unless HAL_NEURON_BUNDLED_LIBNRT=0. Fills path
 * when it loads. */
static void *open_bundled(char *path, size_t path_size, char *reasons, size_t size)
{
    const char *env = getenv(TRN_ENV_BUNDLED);
    Dl_info self;
    if ((env != NULL && strcmp(env, "0") == 0) || !dladdr((void *)&trn_nrt_load, &self) ||
        self.dli_fname == NULL)
        return NULL;
    const char *slash = strrchr(self.dli_fname, '/');
    if (slash == NULL)
        return NULL;
    char candidate[PATH_MAX];
    snprintf(candidate, sizeof(candidate), "%.*s/%s", (int)(slash - self.dli_fname), self.dli_fname,
             TRN_LIBNRT_SONAME);
    void *dl = open_candidate(candidate, "next to the backend", reasons, size);
    if (dl != NULL)
        snprintf(path, path_size, "%s", candidate);
    return dl;
}

/* Resolves every function; on failure names all the missing ones. */
static hal_status_t resolve_symbols(trn_nrt_t *nrt, char *msg, size_t msg_size)
{
    char missing[TRN_MSG_MAX] = "";
    size_t used = 0;
    unsigned count = 0;
    for (size_t i = 0; i < TRN_NRT_SYMBOL_COUNT; i++) {
        dlerror();
        void *sym = dlsym(nrt->dl, trn_nrt_symbols[i].name);
        if (sym == NULL) {
            if (used < sizeof(missing)) {
                int n = snprintf(missing + used, sizeof(missing) - used, "%s%s",
                                 count > 0 ? ", " : "", trn_nrt_symbols[i].name);
                used += n > 0 ? (size_t)n : 0;
            }
            count++;
            continue;
        }
        /* Function pointers and data pointers have the same representation on every platform
         * dlsym works on (POSIX requires it). */
        memcpy((char *)nrt + trn_nrt_symbols[i].offset, &sym, sizeof(sym));
    }
    if (count == 0) {
        /* The emulator's extension marks it, for messages about what it cannot do. */
        nrt->is_emulator = dlsym(nrt->dl, "nrt_emu_set_fault") != NULL;
        return HAL_OK;
    }
    snprintf(msg, msg_size,
             "libnrt.so.1 at %s lacks %s (%u of the %zu functions the backend needs; it was "
             "written against libnrt " NRT_ABI_LIBNRT_VERSION " of Neuron SDK " NRT_ABI_SDK_VERSION
             ")",
             nrt->path, missing, count, TRN_NRT_SYMBOL_COUNT);
    return HAL_ERROR_NOT_FOUND;
}

hal_status_t trn_nrt_load(trn_nrt_t *nrt, char *msg, size_t msg_size)
{
    memset(nrt, 0, sizeof(*nrt));
    char reasons[TRN_MSG_MAX] = "";
    const char *env = getenv(TRN_ENV_LIBNRT);
    if (env != NULL && env[0] != '\0') {
        nrt->dl = open_candidate(env, TRN_ENV_LIBNRT, reasons, sizeof(reasons));
        if (nrt->dl == NULL) {
            snprintf(msg, msg_size, "cannot load libnrt.so.1 from %s=%s (%s)", TRN_ENV_LIBNRT, env,
                     reasons);
            return HAL_ERROR_NOT_FOUND;
        }
        snprintf(nrt->path, sizeof(nrt->path), "%s", env);
    } else {
        nrt->dl =
            open_candidate(TRN_LIBNRT_INSTALLED, TRN_LIBNRT_INSTALLED, reasons, sizeof(reasons));
        if (nrt->dl != NULL) {
            snprintf(nrt->path, sizeof(nrt->path), "%s", TRN_LIBNRT_INSTALLED);
        } else {
            nrt->dl = open_candidate(TRN_LIBNRT_SONAME, "loader path", reasons, sizeof(reasons));
            if (nrt->dl == NULL)
                nrt->dl = open_bundled(nrt->path, sizeof(nrt->path), reasons, sizeof(reasons));
            if (nrt->dl == NULL) {
                snprintf(msg, msg_size,
                         "the Neuron runtime libnrt.so.1 was not found (%s); install "
                         "aws-neuronx-runtime-lib or set %s to the library's path",
                         reasons, TRN_ENV_LIBNRT);
                return HAL_ERROR_NOT_FOUND;
            }
            if (nrt->path[0] == '\0')
                loaded_path(nrt->dl, TRN_LIBNRT_SONAME, nrt->path, sizeof(nrt->path));
        }
    }
    hal_status_t st = resolve_symbols(nrt, msg, msg_size);
    if (st != HAL_OK) {
        dlclose(nrt->dl);
        nrt->dl = NULL;
    }
    return st;
}

void trn_nrt_unload(trn_nrt_t *nrt)
{
    if (nrt->dl != NULL)
        dlclose(nrt->dl);
    nrt->dl = NULL;
}
