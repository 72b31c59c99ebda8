/* SPDX-License-Identifier: Apache-2.0 */
/* Finding, checking and loading backend libraries; backend handles and their lifetime. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/layers/layer.h"
#include "hal/src/core.h"
#include "hal/src/slots_check.h"

_Static_assert(sizeof(struct hal_backend_s) <= HAL_HANDLE_MAX_SIZE, "handle size");

#define BACKEND_PREFIX "libhal_backend_"
#define BACKEND_SUFFIX ".so"

/* Guards the list of open backends and their reference counts. */
static pthread_mutex_t loader_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hal_backend_s *open_backends;

static const hal_host_services_t host_services = {
    .struct_size = sizeof(hal_host_services_t),
    .api_version = HAL_API_VERSION,
    .set_error = hal_host_set_error,
    .take_error = hal_host_take_error,
};

/* In a forked child the parent's backends cannot work (their threads are gone), so the child
 * forgets them: hal_backend_open then loads a fresh instance. Their handles stay dead-ends. */
static void reset_after_fork(void)
{
    pthread_mutex_init(&loader_lock, NULL);
    hal_forget_objects_after_fork(open_backends);
    open_backends = NULL;
    hal_mem_map_reset_after_fork();
    hal_handle_pool_reset_after_fork();
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, reset_after_fork);
}

hal_status_t hal_get_api_version(uint32_t *version)
{
    HAL_CHECK_NOT_NULL(version, NULL, "hal_get_api_version");
    *version = HAL_API_VERSION;
    return HAL_OK;
}

static bool valid_backend_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= HAL_BACKEND_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-')
            return false;
    }
    return true;
}

/* Refuses a library that anyone could have replaced: the file itself, the directory it was named
 * in, or (after resolving symlinks) the directory it really lives in must not be world-writable. */
static hal_status_t check_not_world_writable(const char *path, const char *call)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return hal_error(HAL_ERROR_NOT_FOUND, NULL, call, "cannot resolve '%s': %s", path,
                         strerror(errno));
    char given_dir[PATH_MAX], real_dir[PATH_MAX];
    snprintf(given_dir, sizeof(given_dir), "%s", path);
    snprintf(real_dir, sizeof(real_dir), "%s", real);
    const char *checks[3] = { real, dirname(given_dir), dirname(real_dir) };
    for (int i = 0; i < 3; i++) {
        struct stat st;
        if (stat(checks[i], &st) != 0)
            return hal_error(HAL_ERROR_NOT_FOUND, NULL, call, "cannot stat '%s': %s", checks[i],
                             strerror(errno));
        if (st.st_mode & S_IWOTH)
            return hal_error(HAL_ERROR_PERMISSION_DENIED, NULL, call,
                             "refusing to load backend '%s': '%s' is world-writable", path,
                             checks[i]);
    }
    return HAL_OK;
}

/* Directory holding the HAL library (or the program it is linked into). */
static bool hal_library_dir(char *out, size_t size)
{
    Dl_info info;
    if (!dladdr((void *)&hal_backend_open, &info) || !info.dli_fname)
        return false;
    char real[PATH_MAX];
    if (!realpath(info.dli_fname, real))
        return false;
    snprintf(out, size, "%s", dirname(real));
    return true;
}

/* Calls fn(dir) for each search directory in order until it returns true. */
static bool for_each_search_dir(bool (*fn)(const char *dir, void *ctx), void *ctx)
{
    const char *env = getenv("HAL_BACKEND_PATH");
    if (env && *env) {
        char *copy = strdup(env);
        if (!copy)
            return false;
        char *save = NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
            if (fn(dir, ctx)) {
                free(copy);
                return true;
            }
        }
        free(copy);
    }
    char libdir[PATH_MAX];
    return hal_library_dir(libdir, sizeof(libdir)) && fn(libdir, ctx);
}

typedef struct find_ctx {
    const char *name;
    char path[PATH_MAX];
} find_ctx_t;

static bool find_in_dir(const char *dir, void *ctx)
{
    find_ctx_t *f = ctx;
    snprintf(f->path, sizeof(f->path), "%s/" BACKEND_PREFIX "%s" BACKEND_SUFFIX, dir, f->name);
    return access(f->path, F_OK) == 0;
}

/* Checks a table against the slot spec: as long as the minor version it claims needs (a table of
 * a newer minor version than ours is read as one of ours), and every slot that version requires
 * set. */
static hal_status_t check_table(const hal_backend_ops_t *table, const char *path, const char *call)
{
    uint32_t minor = HAL_VERSION_MINOR(table->api_version);
    if (minor > HAL_API_VERSION_MINOR)
        minor = HAL_API_VERSION_MINOR;
    size_t need = hal_slots_table_size(minor);
    if (table->struct_size < need)
        return hal_error(HAL_ERROR_VERSION_MISMATCH, NULL, call,
                         "backend '%s' ('%s') claims HAL API %u.%u, but its ops table is %zu bytes "
                         "and a %u.%u table has at least %zu",
                         table->name, path, HAL_API_VERSION_MAJOR, minor, table->struct_size,
                         HAL_API_VERSION_MAJOR, minor, need);
    uint32_t since = 0;
    const char *slot = hal_slots_missing_required(table, minor, &since);
    if (slot)
        return hal_error(HAL_ERROR_VERSION_MISMATCH, NULL, call,
                         "backend '%s' ('%s') leaves the required slot %s (since HAL API %u.%u) "
                         "NULL",
                         table->name, path, slot, HAL_API_VERSION_MAJOR, since);
    return HAL_OK;
}

/* Loads the library and checks its location, version and table, for `call` (the public function
 * in the messages). On success *dl and *ops are set. */
static hal_status_t load_library(const char *call, const char *arg, char *resolved,
                                 size_t resolved_size, void **dl, const hal_backend_ops_t **ops)
{
    hal_status_t st;
    void *handle = NULL;
    if (strchr(arg, '/')) {
        snprintf(resolved, resolved_size, "%s", arg);
    } else {
        if (!valid_backend_name(arg))
            return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                             "invalid backend name '%.80s' (letters, digits, '_' and '-', at most "
                             "%d characters)",
                             arg, HAL_BACKEND_NAME_MAX - 1);
        find_ctx_t f = { .name = arg };
        if (for_each_search_dir(find_in_dir, &f)) {
            snprintf(resolved, resolved_size, "%s", f.path);
        } else {
            /* Last resort: the dynamic loader's own search path. */
            char soname[128];
            snprintf(soname, sizeof(soname), BACKEND_PREFIX "%s" BACKEND_SUFFIX, arg);
            handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
            if (!handle)
                return hal_error(HAL_ERROR_NOT_FOUND, NULL, call,
                                 "backend '%s' not found in HAL_BACKEND_PATH, next to the HAL "
                                 "library, or on the loader path",
                                 arg);
            struct link_map *map = NULL;
            if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name) {
                dlclose(handle);
                return hal_error(HAL_ERROR_NOT_FOUND, NULL, call,
                                 "cannot tell where the loader found '%s'", soname);
            }
            snprintf(resolved, resolved_size, "%s", map->l_name);
        }
    }
    HAL_CHECK_GOTO(check_not_world_writable(resolved, call), st, out_close);
    if (!handle) {
        handle = dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
        if (!handle)
            return hal_error(HAL_ERROR_NOT_FOUND, NULL, call, "dlopen failed: %s", dlerror());
    }
    hal_backend_entry_fn entry = (hal_backend_entry_fn)dlsym(handle, HAL_BACKEND_ENTRY_SYMBOL);
    if (!entry) {
        st = hal_error(HAL_ERROR_NOT_FOUND, NULL, call, "'%s' does not export %s", resolved,
                       HAL_BACKEND_ENTRY_SYMBOL);
        goto out_close;
    }
    const hal_backend_ops_t *table = NULL;
    st = entry(HAL_API_VERSION, &table);
    if (st == HAL_OK && !table)
        st = HAL_ERROR_INTERNAL;
    if (st != HAL_OK) {
        hal_error(st, NULL, call, "%s in '%s' returned %s", HAL_BACKEND_ENTRY_SYMBOL, resolved,
                  hal_status_string(st));
        goto out_close;
    }
    if (table->struct_size < offsetof(hal_backend_ops_t, init) || !table->name) {
        st = hal_error(HAL_ERROR_VERSION_MISMATCH, NULL, call,
                       "'%s' returned a malformed ops table (struct_size %zu)", resolved,
                       table->struct_size);
        goto out_close;
    }
    if (HAL_VERSION_MAJOR(table->api_version) != HAL_API_VERSION_MAJOR) {
        st = hal_error(HAL_ERROR_VERSION_MISMATCH, NULL, call,
                       "backend '%s' implements HAL API %u.%u; this HAL is %u.%u", table->name,
                       HAL_VERSION_MAJOR(table->api_version), HAL_VERSION_MINOR(table->api_version),
                       HAL_API_VERSION_MAJOR, HAL_API_VERSION_MINOR);
        goto out_close;
    }
    HAL_CHECK_GOTO(check_table(table, resolved, call), st, out_close);
    *dl = handle;
    *ops = table;
    return HAL_OK;
out_close:
    if (handle)
        dlclose(handle);
    return st;
}

hal_status_t hal_backend_open(const char *name_or_path, hal_backend_t *out)
{
    static const char call[] = "hal_backend_open";
    if (!name_or_path || !*name_or_path || !out)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "%s is NULL or empty",
                         out ? "name_or_path" : "backend");
    if (strlen(name_or_path) >= PATH_MAX)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "path too long");
    hal_layer_list_t layers;
    HAL_CHECK(hal_layers_parse(getenv("HAL_LAYERS"), &layers));
    pthread_once(&atfork_once, install_atfork);

    hal_status_t st;
    char resolved[PATH_MAX];
    void *dl = NULL;
    const hal_backend_ops_t *table = NULL;
    pthread_mutex_lock(&loader_lock);
    HAL_CHECK_GOTO(load_library(call, name_or_path, resolved, sizeof(resolved), &dl, &table), st,
                   out_unlock);
    char real[PATH_MAX];
    if (!realpath(resolved, real))
        snprintf(real, sizeof(real), "%s", resolved);
    for (struct hal_backend_s *b = open_backends; b; b = b->next_open) {
        if (strcmp(b->path, real) == 0) {
            b->refcount++;
            dlclose(dl); /* drops only the reference this call took */
            *out = b;
            pthread_mutex_unlock(&loader_lock);
            return HAL_OK;
        }
    }

    struct hal_backend_s *b = hal_handle_alloc(sizeof(*b));
    if (!b) {
        st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
        goto out_dlclose;
    }
    /* Slots past the backend's struct_size stay NULL and read as unsupported. */
    size_t n =
        table->struct_size < sizeof(b->ops_storage) ? table->struct_size : sizeof(b->ops_storage);
    memcpy(&b->ops_storage, table, n);
    b->ops_storage.struct_size = sizeof(b->ops_storage);
    b->ops = &b->ops_storage;
    b->validate = hal_layers_keep_handles(&layers);
    b->refcount = 1;
    b->dl = dl;
    b->path = strdup(real);
    if (!b->path) {
        st = hal_error(HAL_ERROR_OUT_OF_HOST_MEMORY, NULL, call, "out of host memory");
        goto out_release;
    }
    b->obj.magic = HAL_MAGIC_BACKEND;

    st = b->ops->init(&host_services, &b->impl);
    if (st != HAL_OK) {
        hal_backend_error(st, b->ops, call);
        goto out_release;
    }
    /* On failure the chain has finished the backend. */
    if (layers.count > 0)
        HAL_CHECK_GOTO(hal_layers_install(b, &layers, &host_services), st, out_release);
    HAL_CHECK_GOTO(hal_device_open_all(b), st, out_fini);
    b->next_open = open_backends;
    open_backends = b;
    *out = b;
    pthread_mutex_unlock(&loader_lock);
    return HAL_OK;

out_fini:
    if (b->ops->fini)
        b->ops->fini(b->impl);
out_release:
    free(b->path);
    hal_handle_release(b, false);
out_dlclose:
    dlclose(dl);
out_unlock:
    pthread_mutex_unlock(&loader_lock);
    return st;
}

hal_status_t hal_backend_close(hal_backend_t backend)
{
    pthread_mutex_lock(&loader_lock);
    if (!backend || backend->obj.magic != HAL_MAGIC_BACKEND) {
        pthread_mutex_unlock(&loader_lock);
        return hal_bad_handle(backend, HAL_MAGIC_BACKEND, "hal_backend_t", "hal_backend_close");
    }
    if (--backend->refcount > 0) {
        pthread_mutex_unlock(&loader_lock);
        return HAL_OK;
    }
    for (struct hal_backend_s **p = &open_backends; *p; p = &(*p)->next_open) {
        if (*p == backend) {
            *p = backend->next_open;
            break;
        }
    }
    hal_device_close_all(backend);
    if (backend->ops->fini)
        backend->ops->fini(backend->impl);
    void *dl = backend->dl;
    free(backend->path);
    hal_handle_release(backend, backend->validate);
    dlclose(dl);
    pthread_mutex_unlock(&loader_lock);
    return HAL_OK;
}

hal_status_t hal_backend_probe(const char *name_or_path, hal_backend_info_t *info)
{
    static const char call[] = "hal_backend_probe";
    if (!name_or_path || !*name_or_path || !info)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "%s is NULL or empty",
                         info ? "name_or_path" : "info");
    if (info->struct_size < sizeof(hal_backend_info_t))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call,
                         "info->struct_size is %zu; set it to sizeof(hal_backend_info_t) (%zu)",
                         info->struct_size, sizeof(hal_backend_info_t));
    if (strlen(name_or_path) >= PATH_MAX)
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, call, "path too long");
    char resolved[PATH_MAX];
    void *dl = NULL;
    const hal_backend_ops_t *table = NULL;
    /* The loader's lock keeps this from interleaving with an open or close of the same file. */
    pthread_mutex_lock(&loader_lock);
    hal_status_t st = load_library(call, name_or_path, resolved, sizeof(resolved), &dl, &table);
    if (st == HAL_OK) {
        snprintf(info->name, sizeof(info->name), "%s", table->name);
        snprintf(info->device_type_name, sizeof(info->device_type_name), "%s",
                 table->device_type_name ? table->device_type_name : table->name);
        info->api_version = table->api_version;
        info->flags = table->flags;
        dlclose(dl);
    }
    pthread_mutex_unlock(&loader_lock);
    return st;
}

typedef struct list_ctx {
    hal_backend_name_t *names;
    size_t capacity, count;
} list_ctx_t;

static void list_add(list_ctx_t *l, const char *name)
{
    size_t limit = l->count < l->capacity ? l->count : l->capacity;
    for (size_t i = 0; i < limit; i++) {
        if (strcmp(l->names[i].name, name) == 0)
            return;
    }
    if (l->count < l->capacity)
        snprintf(l->names[l->count].name, HAL_BACKEND_NAME_MAX, "%s", name);
    l->count++;
}

static bool list_dir(const char *dir, void *ctx)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *e;
    size_t prefix = strlen(BACKEND_PREFIX), suffix = strlen(BACKEND_SUFFIX);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n <= prefix + suffix || strncmp(e->d_name, BACKEND_PREFIX, prefix) != 0 ||
            strcmp(e->d_name + n - suffix, BACKEND_SUFFIX) != 0)
            continue;
        char name[HAL_BACKEND_NAME_MAX];
        size_t len = n - prefix - suffix;
        if (len >= sizeof(name))
            continue;
        memcpy(name, e->d_name + prefix, len);
        name[len] = '\0';
        if (valid_backend_name(name))
            list_add(ctx, name);
    }
    closedir(d);
    return false; /* keep going through every directory */
}

hal_status_t hal_backend_list_available(hal_backend_name_t *names, size_t capacity, size_t *count)
{
    if (!count || (!names && capacity > 0))
        return hal_error(HAL_ERROR_INVALID_ARGUMENT, NULL, "hal_backend_list_available",
                         "%s is NULL", count ? "names" : "count");
    list_ctx_t l = { .names = names, .capacity = capacity };
    /* Duplicates beyond capacity cannot be detected; count every directory's names once by
     * collecting into a private buffer first. */
    hal_backend_name_t scratch[64];
    list_ctx_t all = { .names = scratch, .capacity = 64 };
    for_each_search_dir(list_dir, &all);
    for (size_t i = 0; i < all.count && i < all.capacity; i++)
        list_add(&l, scratch[i].name);
    *count = l.count;
    return HAL_OK;
}

hal_status_t hal_backend_get_info(hal_backend_t backend, const char **name,
                                  const char **device_name, uint32_t *api_version)
{
    static const char call[] = "hal_backend_get_info";
    HAL_CHECK_BACKEND(backend, call);
    HAL_CHECK_NOT_NULL(name, backend->ops->name, call);
    *name = backend->ops->name;
    if (device_name)
        *device_name =
            backend->ops->device_type_name ? backend->ops->device_type_name : backend->ops->name;
    if (api_version)
        *api_version = backend->ops->api_version;
    return HAL_OK;
}
