/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: StableHLO programs compiled to NEFF by the Neuron compiler (neuronx-cc), as
 * AWS's own PyTorch backend does, with an on-disk cache of the NEFFs.
 *
 * The command line is AWS's, run in a working directory of its own:
 *     neuronx-cc compile module.mlir --framework XLA --target <trn1|trn2|inf2> --lnc <n> -O2
 *         --model-type transformer --auto-cast=none [$NEURON_CC_FLAGS] --output module.neff
 * The cache root is NEURON_COMPILE_CACHE_URL (a local directory), else
 * $XDG_CACHE_HOME/torch-hal/neuron-compile-cache, else ~/.cache/torch-hal/neuron-compile-cache.
 * An entry is <root>/neuronxcc-<version>/MODULE_<key>/module.neff, key the SHA-256 of the module,
 * the command line and the compiler's version. A NEFF is compiled in a private directory and
 * renamed into its entry, so two processes filling one entry at once both succeed with the same
 * bytes. A failed compile keeps its directory and reports the path of the compiler's log. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal/services/sha256.h"
#include "hal_backends/trainium/trn_internal.h"

extern char **environ;

#define MAX_FLAGS 64

/* Whether path names an executable file. */
static bool executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Finds name on PATH (or takes it as a path when it has a '/') into out, made absolute: the
 * compiler runs in a working directory of its own. */
static bool find_program(const char *name, char *out, size_t size)
{
    if (strchr(name, '/')) {
        char resolved[PATH_MAX];
        snprintf(out, size, "%s", name);
        if (!executable(out) || !realpath(name, resolved))
            return false;
        snprintf(out, size, "%s", resolved);
        return true;
    }
    const char *path = getenv("PATH");
    if (!path)
        return false;
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len > 0 && (size_t)snprintf(out, size, "%.*s/%s", (int)len, path, name) < size &&
            executable(out))
            return true;
        path += len + (end ? 1 : 0);
    }
    return false;
}

void trn_compiler_find(trn_compiler_t *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    const char *named = getenv(TRN_ENV_NEURON_CC);
    if (named && named[0]) {
        c->named = true;
        c->found = find_program(named, c->path, sizeof(c->path));
        if (!c->found)
            snprintf(c->path, sizeof(c->path), "%s", named);
        return;
    }
    c->found = find_program("neuronx-cc", c->path, sizeof(c->path));
}

void trn_compiler_fini(trn_compiler_t *c)
{
    pthread_mutex_destroy(&c->lock);
}

/* Runs argv in dir (NULL: here) with stdout and stderr to log_path (NULL: /dev/null); *status
 * receives the wait status. Returns 0 or an errno value. */
static int run_program(char *const argv[], const char *dir, const char *log_path, int *status)
{
    posix_spawn_file_actions_t actions;
    int err = posix_spawn_file_actions_init(&actions);
    if (err)
        return err;
    if (dir)
        err = posix_spawn_file_actions_addchdir_np(&actions, dir);
    if (!err)
        err = posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                               log_path ? log_path : "/dev/null",
                                               O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!err)
        err = posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    if (!err)
        err = posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    if (!err)
        err = posix_spawn(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err)
        return err;
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR)
            return errno;
    return 0;
}

/* Reads a whole file into a malloc'd buffer. Returns 0 or an errno value. */
static int read_file(const char *path, void **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno;
    int err = 0;
    char *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0)
        err = errno ? errno : EIO;
    else if (!(buf = malloc(len > 0 ? (size_t)len : 1)))
        err = ENOMEM;
    else if (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)
        err = EIO;
    fclose(f);
    if (err) {
        free(buf);
        return err;
    }
    *data = buf;
    *size = (size_t)len;
    return 0;
}

static int write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return errno;
    int err = fwrite(data, 1, size, f) == size ? 0 : EIO;
    if (fclose(f) != 0 && !err)
        err = errno;
    return err;
}

/* mkdir -p. Returns 0 or an errno value. */
static int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return errno;
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

/* The compiler's version line (`neuronx-cc --version`), read once. */
static hal_status_t compiler_version(trn_backend_t *b, char *out, size_t size)
{
    trn_compiler_t *c = &b->compiler;
    hal_status_t st = HAL_OK;
    pthread_mutex_lock(&c->lock);
    if (!c->have_version) {
        const char *tmp = getenv("TMPDIR");
        char log[PATH_MAX];
        snprintf(log, sizeof(log), "%s/torch-hal-neuronx-cc-version.XXXXXX",
                 tmp && tmp[0] && strlen(tmp) < PATH_MAX - 64 ? tmp : "/tmp");
        int fd = mkstemp(log);
        int status = 0, err = fd < 0 ? errno : 0;
        if (fd >= 0) {
            close(fd);
            char *argv[] = { c->path, "--version", NULL };
            err = run_program(argv, NULL, log, &status);
        }
        void *text = NULL;
        size_t len = 0;
        if (!err && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
            read_file(log, &text, &len) == 0) {
            size_t n = 0;
            const char *t = text;
            while (n < len && n + 1 < sizeof(c->version) && t[n] != '\n' && t[n] != '\r')
                n++;
            memcpy(c->version, t, n);
            c->version[n] = '\0';
            c->have_version = n > 0;
        }
        free(text);
        if (fd >= 0)
            unlink(log);
        if (!c->have_version) {
            trn_set_error(b, "%s --version failed (%s); set %s to a working Neuron compiler",
                          c->path,
                          err                   ? strerror(err)
                          : !WIFEXITED(status)  ? "killed by a signal"
                          : WEXITSTATUS(status) ? "non-zero exit status"
                                                : "no output",
                          TRN_ENV_NEURON_CC);
            st = HAL_ERROR_NOT_FOUND;
        }
    }
    if (st == HAL_OK)
        snprintf(out, size, "%s", c->version);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* The compiler's --target for the instance: trn1 (trn1, trn1n), trn2 (every trn2 size), inf2. */
static const char *compile_target(const trn_backend_t *b)
{
    if (!b->have_instance)
        return "trn1";
    switch (b->instance.family) {
    case NRT_INSTANCE_INF2:
    case NRT_INSTANCE_INF2E:
        return "inf2";
    case NRT_INSTANCE_TRN3:
    case NRT_INSTANCE_TRN3PDS98:
        return "trn3";
    case NRT_INSTANCE_TRN2:
    case NRT_INSTANCE_TRN2N:
    case NRT_INSTANCE_TRN2P:
    case NRT_INSTANCE_TRN2U:
    case NRT_INSTANCE_TRN2E:
    case NRT_INSTANCE_TRN2EU:
    case NRT_INSTANCE_TRN2AC:
    case NRT_INSTANCE_TRN2UAC:
        return "trn2";
    default:
        return "trn1";
    }
}

/* The cache root into out (see the top of the file). */
static hal_status_t cache_root(trn_backend_t *b, char *out, size_t size)
{
    const char *url = getenv(TRN_ENV_CACHE_URL);
    if (url && url[0]) {
        if (strncmp(url, "file://", 7) == 0)
            url += 7;
        if (strstr(url, "://")) {
            trn_set_error(b,
                          "%s=%s: only a local directory is supported as the NEFF cache (no "
                          "remote store such as s3://)",
                          TRN_ENV_CACHE_URL, url);
            return HAL_ERROR_INVALID_ARGUMENT;
        }
        snprintf(out, size, "%s", url);
        return HAL_OK;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0])
        snprintf(out, size, "%s/torch-hal/neuron-compile-cache", xdg);
    else if (home && home[0])
        snprintf(out, size, "%s/.cache/torch-hal/neuron-compile-cache", home);
    else
        snprintf(out, size, "/tmp/torch-hal-neuron-compile-cache-%u", (unsigned)getuid());
    return HAL_OK;
}

/* The version as a directory name: characters other than [A-Za-z0-9.+-] become '_'. */
static void version_dir(const char *version, char *out, size_t size)
{
    const char *v = strrchr(version, ' ');
    v = v ? v + 1 : version;
    size_t n = 0;
    for (; *v && n + 1 < size; v++, n++) {
        char ch = *v;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '+' || ch == '-';
        out[n] = ok ? ch : '_';
    }
    out[n] = '\0';
}

/* Removes what a successful compile left in its working directory. */
static void remove_workdir(const char *dir)
{
    static const char *const names[] = { "module.mlir", "module.neff", "log-neuron-cc.txt" };
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < (int)sizeof(path))
            unlink(path);
    }
    rmdir(dir); /* fails, harmlessly, if the compiler left other files */
}

hal_status_t trn_compile_stablehlo(trn_device_t *device, const void *module, size_t size,
                                   void **neff, size_t *neff_size)
{
    trn_backend_t *b = device->backend;
    char version[sizeof(b->compiler.version)];
    hal_status_t st = compiler_version(b, version, sizeof(version));
    if (st != HAL_OK)
        return st;

    /* The command line, after the compiler's path. */
    char lnc[16];
    const char *lnc_env = getenv(TRN_ENV_LNC);
    const char *target = compile_target(b);
    snprintf(lnc, sizeof(lnc), "%s",
             lnc_env && lnc_env[0]         ? lnc_env
             : strcmp(target, "trn2") == 0 ? "2"
                                           : "1");
    char *argv[16 + MAX_FLAGS] = {
        b->compiler.path, "compile",      "module.mlir",     "--framework", "XLA",
        "--target",       (char *)target, "--lnc",           lnc,           "-O2",
        "--model-type",   "transformer",  "--auto-cast=none"
    };
    int argc = 13;
    char *flags = NULL;
    const char *flags_env = getenv(TRN_ENV_CC_FLAGS);
    if (flags_env && flags_env[0]) {
        flags = strdup(flags_env);
        if (!flags) {
            trn_set_error(b, "out of host memory copying %s", TRN_ENV_CC_FLAGS);
            return HAL_ERROR_OUT_OF_HOST_MEMORY;
        }
        char *save = NULL;
        for (char *t = strtok_r(flags, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
            if (argc >= 13 + MAX_FLAGS) {
                trn_set_error(b, "%s has more than %d flags", TRN_ENV_CC_FLAGS, MAX_FLAGS);
                free(flags);
                return HAL_ERROR_INVALID_ARGUMENT;
            }
            argv[argc++] = t;
        }
    }
    argv[argc++] = "--output";
    argv[argc++] = "module.neff";
    argv[argc] = NULL;

    /* The key: module, command line (without the compiler's path), version. */
    hal_sha256_ctx_t ctx;
    uint8_t digest[HAL_SHA256_BYTES];
    char key[2 * HAL_SHA256_BYTES + 1];
    hal_sha256_init(&ctx);
    hal_sha256_update(&ctx, module, size);
    for (int i = 1; i < argc; i++)
        hal_sha256_update(&ctx, argv[i], strlen(argv[i]) + 1);
    hal_sha256_update(&ctx, version, strlen(version) + 1);
    hal_sha256_final(&ctx, digest);
    hal_sha256_hex(digest, key);

    char root[PATH_MAX], vdir[64], entry[PATH_MAX], target_neff[PATH_MAX];
    st = cache_root(b, root, sizeof(root));
    if (st != HAL_OK) {
        free(flags);
        return st;
    }
    version_dir(version, vdir, sizeof(vdir));
    char work[PATH_MAX], path[PATH_MAX], log[PATH_MAX];
    if (snprintf(entry, sizeof(entry), "%s/neuronxcc-%s/MODULE_%s", root, vdir, key) >=
            (int)sizeof(entry) ||
        snprintf(target_neff, sizeof(target_neff), "%s/module.neff", entry) >=
            (int)sizeof(target_neff) ||
        snprintf(work, sizeof(work), "%s/work.XXXXXX", entry) >= (int)sizeof(work) ||
        snprintf(log, sizeof(log), "%s/log-neuron-cc.txt", work) >= (int)sizeof(log)) {
        trn_set_error(b, "the NEFF cache directory %s is too long a path", root);
        free(flags);
        return HAL_ERROR_INVALID_ARGUMENT;
    }

    /* A hit: the entry's NEFF. */
    if (read_file(target_neff, neff, neff_size) == 0) {
        free(flags);
        return HAL_OK;
    }
    int err = make_dirs(entry);
    if (!err && !mkdtemp(work))
        err = errno;
    if (err) {
        trn_set_error(b,
                      "cannot create the NEFF cache entry %s: %s (set %s to a writable "
                      "directory)",
                      entry, strerror(err), TRN_ENV_CACHE_URL);
        free(flags);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    /* work has the length it had when log was formatted from it: these fit. */
    if (snprintf(log, sizeof(log), "%s/log-neuron-cc.txt", work) >= (int)sizeof(log) ||
        snprintf(path, sizeof(path), "%s/module.mlir", work) >= (int)sizeof(path))
        err = ENAMETOOLONG;
    if (!err)
        err = write_file(path, module, size);
    int status = 0;
    if (!err)
        err = run_program(argv, work, log, &status);
    free(flags);
    if (err) {
        trn_set_error(b, "cannot run the Neuron compiler %s in %s: %s", b->compiler.path, work,
                      strerror(err));
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        trn_set_error(b,
                      "neuronx-cc refused the StableHLO module (%s %d; target %s, LNC %s); its "
                      "log: %s",
                      WIFEXITED(status) ? "exit status" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), target, lnc, log);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    if (snprintf(path, sizeof(path), "%s/module.neff", work) >= (int)sizeof(path) ||
        rename(path, target_neff) != 0) {
        err = errno;
        trn_set_error(b,
                      "neuronx-cc succeeded but its NEFF %s cannot be moved into the cache: %s "
                      "(log: %s)",
                      path, strerror(err), log);
        return HAL_ERROR_INVALID_ARGUMENT;
    }
    remove_workdir(work);
    err = read_file(target_neff, neff, neff_size);
    if (err) {
        trn_set_error(b, "cannot read the NEFF %s: %s", target_neff, strerror(err));
        return err == ENOMEM ? HAL_ERROR_OUT_OF_HOST_MEMORY : HAL_ERROR_INVALID_ARGUMENT;
    }
    return HAL_OK;
}
