/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: the StableHLO executor process and the channel to it.
 *
 * StableHLO modules are compiled and run by a real compiler, XLA's CPU backend, through jaxlib:
 * a Python process, stablehlo_executor.py (shipped beside libnrt.so.1), that the emulator starts
 * on first use, so that programs without Python in them (C programs, the conformance suite) can
 * execute modules too. One executor per process; requests are serialised on ex.lock.
 *
 * Start: posix_spawn (never fork + exec of a threaded process) of `$NEURON_EMU_PYTHON <script>`
 * (default `python3`, looked up in PATH) in a process group of its own (a terminal's Ctrl-C is
 * the host program's to handle), with an empty signal mask and default signal actions. The
 * script is $NEURON_EMU_EXECUTOR, else stablehlo_executor.py in the directory of this library
 * (found with dladdr), of its real path, or in the Bazel runfiles (<library>.runfiles/torch_hal/
 * hal_backends/trainium/emulator/, $RUNFILES_DIR, $TEST_SRCDIR). The executor gets:
 *   fd 3  the channel: one end of a SOCK_STREAM socketpair
 *   fd 4  the tensor region: a memfd that both sides map, grown by the emulator on demand
 *   fd 0  /dev/null; fd 1 and fd 2 this process's stderr
 * and nothing else: every other descriptor is closed in the child (the emulator's own are
 * close-on-exec as well).
 *
 * Protocol (the other side: stablehlo_executor.py, whose docstring says the same). Every
 * message, in either direction, is a 32-byte header in host byte order, then `len` bytes:
 *   u32 magic 0x3158454e ("NEX1"), u32 kind, u64 id (a model), u64 arg, u64 len
 * The executor speaks first: READY (payload "python X, jax Y, jaxlib Z") or ERROR (why it
 * cannot run, e.g. "cannot import jaxlib: ..."; then it exits). Then, one request at a time,
 * each answered by OK, ERROR (payload: message) or BAD_INPUT (payload: message):
 *   LOAD (payload: the module, text or bytecode) -> OK, id = the model, payload: its signature,
 *        one line per tensor, parameters of main then results: "in|out <element type> <dim>...";
 *        the module is compiled there, once
 *   EXECUTE (id, arg = the region's size, payload: a (u64 offset, u64 bytes) pair per tensor,
 *        inputs then outputs) -> OK once the outputs are in the region
 *   UNLOAD (id) -> OK
 * Closing the channel ends the executor (it exits at end of file).
 *
 * Lifetime: nrt_close stops the executor (closes the channel, waits for the exit, kills it after
 * EXEC_STOP_WAIT_MS); so does unloading the library. A forked child drops its copies of the
 * channel and region without touching the parent's executor, and starts its own on next use.
 * An executor that dies (end of file on the channel) fails the request in progress; the next
 * request starts a new one (a new generation: models compiled by the old one are loaded again,
 * emu_stablehlo.c). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/emu_internal.h"
#include "hal_backends/trainium/emulator/nrt_emu.h"

extern char **environ;

#define EXEC_MAGIC            0x3158454eu /* "NEX1" */
#define EXEC_CHANNEL_FD       3
#define EXEC_REGION_FD        4
#define EXEC_START_TIMEOUT_MS 120000 /* importing jax takes seconds, more on a cold cache */
#define EXEC_STOP_WAIT_MS     2000   /* for the exit after the channel closes */
#define EXEC_REPLY_MAX        ((uint64_t)16 << 20) /* a signature or a message */
#define EXEC_REGION_MIN       ((size_t)1 << 20)
#define EXEC_SCRIPT           "stablehlo_executor.py"
#define EXEC_RUNFILES_PATH    "torch_hal/hal_backends/trainium/emulator/" EXEC_SCRIPT

typedef struct exec_header {
    uint32_t magic, kind;
    uint64_t id, arg, len;
} exec_header_t;
_Static_assert(sizeof(exec_header_t) == 32, "the executor's header is 32 bytes");

static struct {
    pthread_mutex_t lock;
    pid_t pid;     /* 0: no executor */
    int fd;        /* the channel, -1 without executor */
    int region_fd; /* the memfd, -1 without executor */
    unsigned char *region;
    size_t region_size;
    uint64_t generation; /* executors started so far; the current one's number */
    char about[192];     /* its READY payload */
} ex = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .region_fd = -1 };

/* The interpreter that runs the executor: NEURON_EMU_PYTHON or python3. */
static const char *python(void)
{
    const char *p = emu_getenv("NEURON_EMU_PYTHON");
    return p != NULL ? p : "python3";
}

/* Copies path into out if it names a readable file. */
static bool readable(const char *path, char *out, size_t size)
{
    if (access(path, R_OK) != 0 || strlen(path) >= size)
        return false;
    snprintf(out, size, "%s", path);
    return true;
}

/* Finds the executor script (see the top of the file). false with why filled if none is. */
static bool find_script(char *out, size_t size, char *why, size_t why_size)
{
    const char *env = emu_getenv("NEURON_EMU_EXECUTOR");
    if (env != NULL) {
        if (readable(env, out, size))
            return true;
        snprintf(why, why_size, "NEURON_EMU_EXECUTOR=%s: %s", env, strerror(errno));
        return false;
    }
    char lib[PATH_MAX] = "", real[PATH_MAX] = "", path[PATH_MAX + 64];
    Dl_info info;
    if (dladdr((const void *)(uintptr_t)&nrt_emu_stablehlo_status, &info) != 0 &&
        info.dli_fname != NULL && strlen(info.dli_fname) < sizeof(lib))
        snprintf(lib, sizeof(lib), "%s", info.dli_fname);
    if (lib[0] != '\0' && realpath(lib, real) == NULL)
        real[0] = '\0';
    const char *libs[2] = { lib, real };
    for (int i = 0; i < 2; i++) {
        if (libs[i][0] == '\0')
            continue;
        const char *slash = strrchr(libs[i], '/');
        int dir = slash != NULL ? (int)(slash - libs[i]) : 1;
        snprintf(path, sizeof(path), "%.*s/%s", dir, slash != NULL ? libs[i] : ".", EXEC_SCRIPT);
        if (readable(path, out, size))
            return true;
        snprintf(path, sizeof(path), "%s.runfiles/%s", libs[i], EXEC_RUNFILES_PATH);
        if (readable(path, out, size))
            return true;
    }
    static const char *const roots[] = { "RUNFILES_DIR", "TEST_SRCDIR" };
    for (int i = 0; i < 2; i++) {
        const char *root = emu_getenv(roots[i]);
        snprintf(path, sizeof(path), "%s/%s", root != NULL ? root : "", EXEC_RUNFILES_PATH);
        if (root != NULL && readable(path, out, size))
            return true;
    }
    snprintf(why, why_size,
             "cannot find the executor script %s beside %s or in its Bazel runfiles; set "
             "NEURON_EMU_EXECUTOR to its path",
             EXEC_SCRIPT, lib[0] != '\0' ? lib : "libnrt.so.1");
    return false;
}

/* Moves fd to a number of at least 10 (close-on-exec), so that the spawn's dup2 onto 3 and 4
 * never meets a descriptor already there. */
static int move_high(int fd)
{
    if (fd < 0 || fd >= 10)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return high;
}

/* Waits up to wait_ms for the executor to exit, then kills it; reaps it. */
static void reap(pid_t pid, int wait_ms)
{
    for (int waited = 0;; waited++) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return; /* exited (or reaped by a SIGCHLD handler of the program: nothing to do) */
        if (waited >= wait_ms)
            break;
        usleep(1000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* Forgets the executor: closes the channel and the region (and, unless child, reaps it).
 * Caller holds ex.lock. */
static void drop(bool child, int wait_ms)
{
    if (ex.fd >= 0)
        close(ex.fd);
    if (ex.region_fd >= 0)
        close(ex.region_fd);
    if (ex.region != NULL)
        munmap(ex.region, ex.region_size);
    if (!child && ex.pid > 0)
        reap(ex.pid, wait_ms);
    ex.pid = 0;
    ex.fd = ex.region_fd = -1;
    ex.region = NULL;
    ex.region_size = 0;
    ex.about[0] = '\0';
}

/* recv of exactly len bytes, waiting at most timeout_ms in all (-1: no limit). 0, or -1 with
 * errno (0 for end of file, ETIMEDOUT). */
static int recv_exact(void *buf, size_t len, int timeout_ms)
{
    unsigned char *p = buf;
    uint64_t deadline = emu_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000u;
    while (len > 0) {
        if (timeout_ms >= 0) {
            uint64_t now = emu_now_ns();
            struct pollfd pfd = { .fd = ex.fd, .events = POLLIN };
            int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000u) + 1;
            int n = poll(&pfd, 1, left);
            if (n == 0) {
                errno = ETIMEDOUT;
                return -1;
            }
            if (n < 0 && errno != EINTR)
                return -1;
            if (n < 0)
                continue;
        }
        ssize_t k = recv(ex.fd, p, len, 0);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
        } else if (k == 0) {
            errno = 0;
            return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

/* Reads one message: its header and its payload (malloc'd, NUL-terminated). false with errno
 * as recv_exact (EPROTO for something that is not the protocol). */
static bool read_message(exec_header_t *h, char **payload, int timeout_ms)
{
    *payload = NULL;
    if (recv_exact(h, sizeof(*h), timeout_ms) != 0)
        return false;
    if (h->magic != EXEC_MAGIC || h->len > EXEC_REPLY_MAX) {
        errno = EPROTO;
        return false;
    }
    *payload = malloc(h->len + 1);
    if (*payload == NULL) {
        errno = ENOMEM;
        return false;
    }
    if (recv_exact(*payload, h->len, timeout_ms) != 0) {
        free(*payload);
        *payload = NULL;
        return false;
    }
    (*payload)[h->len] = '\0';
    return true;
}

/* Says why the channel failed, reaping the executor when it ended; then drops it. */
static void channel_failed(char *why, size_t size, const char *doing)
{
    int err = errno;
    pid_t pid = ex.pid;
    int status = 0;
    bool ended = false;
    if (err == 0 || err == EPIPE || err == ECONNRESET) { /* it closed the channel: exiting */
        for (int i = 0; i < EXEC_STOP_WAIT_MS && !ended; i++) {
            pid_t r = waitpid(pid, &status, WNOHANG);
            ended = r == pid;
            if (r < 0 && errno != EINTR)
                break;
            if (!ended)
                usleep(1000);
        }
    }
    char how[96];
    if (ended && WIFEXITED(status))
        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
    else if (ended && WIFSIGNALED(status))
        snprintf(how, sizeof(how), "was killed by signal %d", WTERMSIG(status));
    else if (err == ETIMEDOUT)
        snprintf(how, sizeof(how), "did not answer in time");
    else
        snprintf(how, sizeof(how), "failed: %s", err == 0 ? "end of file" : strerror(err));
    snprintf(why, size, "the StableHLO executor (pid %ld, NEURON_EMU_PYTHON=%s) %s while %s%s",
             (long)pid, python(), how, doing,
             ended && WIFEXITED(status) ? " (its messages are on stderr)" : "");
    if (ended)
        ex.pid = 0; /* reaped here */
    drop(false, 0);
}

/* Starts the executor and waits for its READY. Caller holds ex.lock. false with why. */
static bool start(char *why, size_t size)
{
    char script[PATH_MAX];
    if (!find_script(script, sizeof(script), why, size))
        return false;
    int sv[2] = { -1, -1 };
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, size, "socketpair for the StableHLO executor: %s", strerror(errno));
        return false;
    }
    sv[0] = move_high(sv[0]);
    sv[1] = move_high(sv[1]);
    int region = move_high(memfd_create("nrt-emu-tensors", MFD_CLOEXEC));
    int made = sv[0] < 0 || sv[1] < 0 || region < 0 ? errno : 0;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, sv[1], EXEC_CHANNEL_FD);
    posix_spawn_file_actions_adddup2(&fa, region, EXEC_REGION_FD);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
    posix_spawn_file_actions_addclosefrom_np(&fa, EXEC_REGION_FD + 1);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    char *argv[] = { (char *)python(), script, NULL };
    pid_t pid = 0;
    int rc = made != 0 ? made : posix_spawnp(&pid, python(), &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (sv[1] >= 0)
        close(sv[1]);
    if (rc != 0) {
        snprintf(why, size, "cannot start NEURON_EMU_PYTHON=%s for the StableHLO executor: %s",
                 python(), strerror(rc));
        if (sv[0] >= 0)
            close(sv[0]);
        if (region >= 0)
            close(region);
        return false;
    }
    ex.pid = pid;
    ex.fd = sv[0];
    ex.region_fd = region;
    ex.generation++;
    exec_header_t h;
    char *payload = NULL;
    if (!read_message(&h, &payload, EXEC_START_TIMEOUT_MS)) {
        channel_failed(why, size, "starting");
        return false;
    }
    if (h.kind != EMU_EXEC_READY) {
        snprintf(why, size, "NEURON_EMU_PYTHON=%s %s", python(), payload);
        free(payload);
        drop(false, EXEC_STOP_WAIT_MS);
        return false;
    }
    snprintf(ex.about, sizeof(ex.about), "%s", payload);
    free(payload);
    return true;
}

/* Serialises the executor's users (one request at a time). */
void emu_executor_lock(void)
{
    pthread_mutex_lock(&ex.lock);
}

/* Ends emu_executor_lock. */
void emu_executor_unlock(void)
{
    pthread_mutex_unlock(&ex.lock);
}

/* Whether the running executor is still there: an idle one sends nothing, so a readable or hung
 * up channel means that it ended. One that did is reaped and dropped, with a warning. */
static bool still_there(const char *api)
{
    struct pollfd pfd = { .fd = ex.fd, .events = POLLIN };
    if (ex.pid == 0 || poll(&pfd, 1, 0) == 0)
        return ex.pid != 0;
    char why[768];
    errno = 0;
    channel_failed(why, sizeof(why), "idle");
    EMU_WARN(api, "%s; starting a new one", why);
    return false;
}

/* Makes sure an executor runs, starting one if needed; reports its generation. */
NRT_STATUS emu_executor_start(const char *api, uint64_t *generation)
{
    char why[768];
    if (!still_there(api) && !start(why, sizeof(why))) {
        EMU_ERR(api, "%s", why);
        return NRT_FAILURE;
    }
    *generation = ex.generation;
    return NRT_SUCCESS;
}

/* Whether an executor runs, without starting one (for unloading). */
bool emu_executor_running(uint64_t *generation)
{
    *generation = ex.generation;
    return ex.pid != 0;
}

/* One request and its reply; a channel that fails drops the executor. */
NRT_STATUS emu_executor_request(const char *api, uint32_t kind, uint64_t id, const void *payload,
                                size_t len, emu_exec_reply_t *reply)
{
    const char *doing = kind == EMU_EXEC_LOAD      ? "compiling a module"
                        : kind == EMU_EXEC_EXECUTE ? "executing a module"
                                                   : "unloading a module";
    char why[768];
    memset(reply, 0, sizeof(*reply));
    if (ex.pid == 0) {
        EMU_ERR(api, "the StableHLO executor is not running (it ended earlier)");
        return NRT_FAILURE;
    }
    exec_header_t h = {
        .magic = EXEC_MAGIC, .kind = kind, .id = id, .arg = ex.region_size, .len = len
    };
    const unsigned char *parts[2] = { (const unsigned char *)&h, payload };
    size_t sizes[2] = { sizeof(h), len };
    for (int i = 0; i < 2; i++) {
        while (sizes[i] > 0) {
            ssize_t k = send(ex.fd, parts[i], sizes[i], MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                channel_failed(why, sizeof(why), doing);
                EMU_ERR(api, "%s", why);
                return NRT_FAILURE;
            }
            parts[i] += k;
            sizes[i] -= (size_t)k;
        }
    }
    if (!read_message(&h, &reply->text, -1)) {
        channel_failed(why, sizeof(why), doing);
        EMU_ERR(api, "%s", why);
        return NRT_FAILURE;
    }
    reply->kind = h.kind;
    reply->id = h.id;
    reply->len = h.len;
    return NRT_SUCCESS;
}

/* Grows the shared tensor region (never shrinks it); the executor maps it again when a
 * request carries a larger size. */
unsigned char *emu_executor_region(const char *api, size_t size)
{
    if (size <= ex.region_size)
        return ex.region;
    size_t grown = ex.region_size * 2 > size ? ex.region_size * 2 : size;
    grown = (grown + EXEC_REGION_MIN - 1) / EXEC_REGION_MIN * EXEC_REGION_MIN;
    void *p = MAP_FAILED;
    if (ftruncate(ex.region_fd, (off_t)grown) == 0)
        p = mmap(NULL, grown, PROT_READ | PROT_WRITE, MAP_SHARED, ex.region_fd, 0);
    if (p == MAP_FAILED) {
        EMU_ERR(api, "cannot grow the StableHLO executor's tensor region to %zu bytes: %s", grown,
                strerror(errno));
        return NULL;
    }
    if (ex.region != NULL)
        munmap(ex.region, ex.region_size);
    ex.region = p;
    ex.region_size = grown;
    return ex.region;
}

/* nrt_close: the executor goes with the runtime. */
void emu_executor_stop(void)
{
    pthread_mutex_lock(&ex.lock);
    drop(false, EXEC_STOP_WAIT_MS);
    pthread_mutex_unlock(&ex.lock);
}

/* Unloading the library (dlclose, exit): the executor goes too. A request in flight on another
 * thread keeps it: the exit closes the channel, and the executor ends at end of file. */
__attribute__((destructor)) static void emu_executor_unload(void)
{
    if (pthread_mutex_trylock(&ex.lock) != 0)
        return;
    drop(false, EXEC_STOP_WAIT_MS);
    pthread_mutex_unlock(&ex.lock);
}

/* Fork: no request is half sent when the child is made. */
void emu_executor_lock_for_fork(void)
{
    pthread_mutex_lock(&ex.lock);
}

/* Fork: parent and child release the lock taken before it. */
void emu_executor_unlock_after_fork(void)
{
    pthread_mutex_unlock(&ex.lock);
}

/* Fork, child side: forgets the parent's executor. */
void emu_executor_reset_after_fork(void)
{
    drop(true, 0); /* the parent's executor is not the child's: its copies only are closed */
}

/* Emulator extension (nrt_emu.h): whether StableHLO modules can be executed here. */
NRT_EMU_EXPORT NRT_STATUS nrt_emu_stablehlo_status(char *why, size_t size)
{
    char text[768];
    pthread_mutex_lock(&ex.lock);
    bool ok = still_there("nrt_emu_stablehlo_status") || start(text, sizeof(text));
    if (ok)
        snprintf(text, sizeof(text), "StableHLO executor pid %ld (%s)", (long)ex.pid, ex.about);
    pthread_mutex_unlock(&ex.lock);
    if (why != NULL && size > 0)
        snprintf(why, size, "%s", text);
    if (!ok)
        EMU_INFO("nrt_emu_stablehlo_status", "%s", text);
    return ok ? NRT_SUCCESS : NRT_FAILURE;
}
