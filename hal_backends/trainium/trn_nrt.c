/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: finding and loading the Neuron runtime (libnrt.so.1) with dlopen and
 * resolving the functions the backend calls. Nothing is linked against libnrt, so the backend
 * loads on any machine and says precisely what is missing where the runtime is absent or too
 * old.
 *
 * Required are the functions of devices and memory, which every libnrt 2.x has; the others are
 * optional (trn_nrt_t says what each enables) and the backend falls back without them.
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

/* How a function is resolved: required (the backend refuses a runtime without it), optional on
 * its own, or a member of an optional group (dropped whole when one member is missing). */
typedef enum trn_nrt_need {
    TRN_NEED_REQUIRED,
    TRN_NEED_OPTIONAL,
    TRN_NEED_PROGRAMS,
    TRN_NEED_CC,
    TRN_NEED_TRACKERS,
} trn_nrt_need_t;

typedef struct trn_nrt_symbol {
    const char *name;
    size_t offset; /* of the function pointer in trn_nrt_t */
    trn_nrt_need_t need;
} trn_nrt_symbol_t;

/* The entry resolving `symbol` into `field`. The field must point to the symbol's function type
 * from nrt_abi.h (symbol##_fn): the unevaluated comparison of the two pointer types does not
 * compile when they differ (distinct pointer types, an error with -Werror). */
#define TRN_SYM(field, symbol, how)                                                \
    {                                                                              \
        .name = #symbol,                                                           \
        .offset = offsetof(trn_nrt_t, field) +                                     \
                  0 * sizeof(&((trn_nrt_t *)NULL)->field == (symbol##_fn **)NULL), \
        .need = (how)                                                              \
    }

/* An entry whose field has another type than symbol##_fn: nrta_cc_schedule's async API 3 form. */
#define TRN_SYM_AS(field, symbol, type, how)                                                       \
    {                                                                                              \
        .name = #symbol,                                                                           \
        .offset =                                                                                  \
            offsetof(trn_nrt_t, field) + 0 * sizeof(&((trn_nrt_t *)NULL)->field == (type **)NULL), \
        .need = (how)                                                                              \
    }

static const trn_nrt_symbol_t trn_nrt_symbols[] = {
    TRN_SYM(init, nrt_init, TRN_NEED_REQUIRED),
    TRN_SYM(close, nrt_close, TRN_NEED_REQUIRED),
    TRN_SYM(get_visible_vnc_count, nrt_get_visible_vnc_count, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_allocate, nrt_tensor_allocate, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_allocate_slice, nrt_tensor_allocate_slice, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_free, nrt_tensor_free, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_get_va, nrt_tensor_get_va, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_read, nrt_tensor_read, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_write, nrt_tensor_write, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_copy, nrt_tensor_copy, TRN_NEED_REQUIRED),
    TRN_SYM(tensor_memset, nrt_tensor_memset, TRN_NEED_REQUIRED),
    TRN_SYM(get_status_as_str, nrt_get_status_as_str, TRN_NEED_OPTIONAL),
    TRN_SYM(get_version, nrt_get_version, TRN_NEED_OPTIONAL),
    TRN_SYM(get_instance_info, nrt_get_instance_info, TRN_NEED_OPTIONAL),
    TRN_SYM(get_total_vnc_count, nrt_get_total_vnc_count, TRN_NEED_OPTIONAL),
    TRN_SYM(get_vnc_memory_stats, nrt_get_vnc_memory_stats, TRN_NEED_OPTIONAL),
    TRN_SYM(allocate_tensor_set, nrt_allocate_tensor_set, TRN_NEED_PROGRAMS),
    TRN_SYM(destroy_tensor_set, nrt_destroy_tensor_set, TRN_NEED_PROGRAMS),
    TRN_SYM(add_tensor_to_tensor_set, nrt_add_tensor_to_tensor_set, TRN_NEED_PROGRAMS),
    TRN_SYM(load, nrt_load, TRN_NEED_PROGRAMS),
    TRN_SYM(unload, nrt_unload, TRN_NEED_PROGRAMS),
    TRN_SYM(execute, nrt_execute, TRN_NEED_PROGRAMS),
    TRN_SYM(get_model_tensor_info, nrt_get_model_tensor_info, TRN_NEED_PROGRAMS),
    TRN_SYM(free_model_tensor_info, nrt_free_model_tensor_info, TRN_NEED_PROGRAMS),
    TRN_SYM(cc_global_comm_init, nrt_cc_global_comm_init, TRN_NEED_CC),
    TRN_SYM(cc_prepare, nrta_cc_prepare, TRN_NEED_CC),
    TRN_SYM(cc_schedule, nrta_cc_schedule, TRN_NEED_CC),
    TRN_SYM_AS(cc_schedule_v3, nrta_cc_schedule, nrta_cc_schedule_v3_fn, TRN_NEED_CC),
    TRN_SYM(is_completed, nrta_is_completed, TRN_NEED_CC),
    TRN_SYM(error_tracker_create, nrta_error_tracker_create, TRN_NEED_TRACKERS),
    TRN_SYM(error_tracker_destroy, nrta_error_tracker_destroy, TRN_NEED_TRACKERS),
    TRN_SYM(error_tracker_get_list, nrta_error_tracker_get_list, TRN_NEED_TRACKERS),
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

/* Appends ", name" (or "name") to a list of names. */
static void list_append(char *list, size_t size, const char *name)
{
    size_t used = strlen(list);
    if (used < size)
        snprintf(list + used, size - used, "%s%s", used > 0 ? ", " : "", name);
}

static void *field_of(trn_nrt_t *nrt, const trn_nrt_symbol_t *sym)
{
    return (char *)nrt + sym->offset;
}

/* Clears every member of an optional group (one was missing). */
static void drop_group(trn_nrt_t *nrt, trn_nrt_need_t need)
{
    for (size_t i = 0; i < TRN_NRT_SYMBOL_COUNT; i++)
        if (trn_nrt_symbols[i].need == need)
            memset(field_of(nrt, &trn_nrt_symbols[i]), 0, sizeof(void (*)(void)));
}

/* Resolves every function. Missing required ones fail the load, all named; missing optional
 * ones are recorded in nrt->missing and leave their pointer (or their whole group) NULL. */
static hal_status_t resolve_symbols(trn_nrt_t *nrt, char *msg, size_t msg_size)
{
    char missing[TRN_MSG_MAX] = "";
    unsigned count = 0, required = 0;
    bool programs = true, cc = true, trackers = true;
    for (size_t i = 0; i < TRN_NRT_SYMBOL_COUNT; i++) {
        const trn_nrt_symbol_t *sym = &trn_nrt_symbols[i];
        required += sym->need == TRN_NEED_REQUIRED;
        dlerror();
        void *fn = dlsym(nrt->dl, sym->name);
        if (fn == NULL) {
            if (sym->need == TRN_NEED_REQUIRED) {
                list_append(missing, sizeof(missing), sym->name);
                count++;
            } else {
                if (i == 0 || strcmp(trn_nrt_symbols[i - 1].name, sym->name) != 0)
                    list_append(nrt->missing, sizeof(nrt->missing), sym->name);
                programs = programs && sym->need != TRN_NEED_PROGRAMS;
                cc = cc && sym->need != TRN_NEED_CC;
                trackers = trackers && sym->need != TRN_NEED_TRACKERS;
            }
            continue;
        }
        /* Function pointers and data pointers have the same representation on every platform
         * dlsym works on (POSIX requires it). */
        memcpy(field_of(nrt, sym), &fn, sizeof(fn));
    }
    if (count > 0) {
        snprintf(msg, msg_size,
                 "libnrt.so.1 at %s lacks %s (%u of the %u functions the backend needs; it was "
                 "written against libnrt " NRT_ABI_LIBNRT_VERSION
                 " of Neuron SDK " NRT_ABI_SDK_VERSION ")",
                 nrt->path, missing, count, required);
        return HAL_ERROR_NOT_FOUND;
    }
    nrt->have_programs = programs;
    if (!programs)
        drop_group(nrt, TRN_NEED_PROGRAMS);
    nrt->have_cc = cc;
    if (!cc)
        drop_group(nrt, TRN_NEED_CC);
    nrt->have_trackers = trackers;
    if (!trackers)
        drop_group(nrt, TRN_NEED_TRACKERS);
    /* Added by SDK 2.29 and 2.31 with no published signature: only noted. */
    nrt->has_cc_create_stream = dlsym(nrt->dl, "nrt_cc_create_stream") != NULL;
    nrt->has_cc_prepare_coalesced = dlsym(nrt->dl, "nrta_cc_prepare_coalesced") != NULL ||
                                    dlsym(nrt->dl, "nrt_cc_prepare_coalesced") != NULL;
    /* The emulator's extension marks it, for messages about what it cannot do. */
    nrt->is_emulator = dlsym(nrt->dl, "nrt_emu_set_fault") != NULL;
    /* A function pointer from dlsym's object pointer, as POSIX allows. */
    void *stablehlo = dlsym(nrt->dl, "nrt_emu_stablehlo_status");
    memcpy(&nrt->emu_stablehlo_status, &stablehlo, sizeof(stablehlo));
    return HAL_OK;
}

/* Reads the runtime's version (callable before nrt_init, per nrt_version.h). */
static void read_version(trn_nrt_t *nrt)
{
    if (nrt->get_version == NULL)
        return;
    nrt_version_t v;
    memset(&v, 0, sizeof(v));
    if (nrt->get_version(&v, sizeof(v)) != NRT_SUCCESS || (v.rt_major == 0 && v.rt_minor == 0))
        return;
    nrt->have_version = true;
    nrt->version[0] = v.rt_major;
    nrt->version[1] = v.rt_minor;
    nrt->version[2] = v.rt_patch;
    nrt->version[3] = v.rt_maintenance;
    memcpy(nrt->version_detail, v.rt_detail, sizeof(nrt->version_detail));
    nrt->version_detail[sizeof(nrt->version_detail) - 1] = '\0';
}

bool trn_nrt_version_at_least(const trn_nrt_t *nrt, uint64_t major, uint64_t minor)
{
    if (!nrt->have_version)
        return false;
    return nrt->version[0] > major || (nrt->version[0] == major && nrt->version[1] >= minor);
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
        return st;
    }
    read_version(nrt);
    return HAL_OK;
}

void trn_nrt_unload(trn_nrt_t *nrt)
{
    if (nrt->dl != NULL)
        dlclose(nrt->dl);
    nrt->dl = NULL;
}
