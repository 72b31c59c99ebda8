/* SPDX-License-Identifier: Apache-2.0 */
/* Inter-process device memory of the cpu backend, through the ops table: a forked child (with a
 * backend instance of its own, as a real peer process has) maps the parent's memory and the
 * parent sees the child's writes; handles of dead exporters, tampered, malformed or
 * self-exported handles are refused with the documented statuses.
 *
 * Children never start threads (they use the mapped memory directly, which the device's
 * host_addressable property allows): a child of a multi-threaded process may not, under
 * ThreadSanitizer. They leave with _exit so that nothing of the parent's runs twice. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/cpu/tests/cpu_test_util.h"

#define CHILD_FAIL(...)                                         \
    do {                                                        \
        fprintf(stderr, "child %d: ", (int)getpid());           \
        fprintf(stderr, __VA_ARGS__);                           \
        fprintf(stderr, " (last error: %s)\n", t_last_error()); \
        return 1;                                               \
    } while (0)

static const char *arena_base(t_fixture_t *fx, uint32_t dev)
{
    return ((cpu_device_t *)fx->dev[dev])->arena->base;
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7u + 3u);
}

/* Waits for a child and returns its exit status (or 255 if it did not exit normally). */
static int reap(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

static bool write_all(int fd, const void *buf, size_t n)
{
    return write(fd, buf, n) == (ssize_t)n;
}

static bool read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* ---- the child maps the parent's memory ---------------------------------------------------- */

enum { BIG = 1 << 20, SMALL = 64 * 1024, INTERIOR = 4096 };

/* What the child does with the parent's handles: hA names BIG bytes at INTERIOR into an
 * allocation, hB a whole SMALL allocation of the same device. */
static int child_maps(const hal_ipc_handle_t *hA, const hal_ipc_handle_t *hB, ptrdiff_t b_minus_a)
{
    t_fixture_t cx;
    if (t_open(&cx, "1", "64M", NULL, NULL) != HAL_OK)
        CHILD_FAIL("cannot open a backend of its own");
    void *pa = NULL, *pb = NULL, *ca = NULL, *cb = NULL, *pa2 = NULL, *ca2 = NULL;
    size_t sa = 0, sb = 0, sa2 = 0;
    if (cx.ops->mem_ipc_open(cx.dev[0], hA, &pa, &sa, &ca) != HAL_OK)
        CHILD_FAIL("mem_ipc_open(hA) failed");
    if (sa != BIG)
        CHILD_FAIL("size %zu, expected %d", sa, BIG);
    for (size_t i = 0; i < sa; i++) {
        if (((unsigned char *)pa)[i] != pattern(i + INTERIOR))
            CHILD_FAIL("byte %zu differs", i);
    }
    if (cx.ops->mem_ipc_open(cx.dev[0], hB, &pb, &sb, &cb) != HAL_OK)
        CHILD_FAIL("mem_ipc_open(hB) failed");
    /* One mapping per exporter arena: both handles land in it, at the parent's distance. */
    if (sb != SMALL || cb != ca || (char *)pb - (char *)pa != b_minus_a)
        CHILD_FAIL("hB: size %zu, same mapping %d, distance %td (expected %td)", sb, cb == ca,
                   (char *)pb - (char *)pa, b_minus_a);
    if (((unsigned char *)pb)[0] != 0x5a || ((unsigned char *)pb)[SMALL - 1] != 0x5a)
        CHILD_FAIL("hB's bytes differ");
    /* The same handle again: the same address, another reference. */
    if (cx.ops->mem_ipc_open(cx.dev[0], hA, &pa2, &sa2, &ca2) != HAL_OK || pa2 != pa)
        CHILD_FAIL("reopening hA gave %p, expected %p", pa2, pa);
    memset(pa, 0xc3, sa);
    memset(pb, 0x3c, sb);
    cx.ops->mem_ipc_close(cx.dev[0], pa2, ca2);
    cx.ops->mem_ipc_close(cx.dev[0], pb, cb);
    if (((unsigned char *)pa)[0] != 0xc3) /* still mapped: hA is open once more */
        CHILD_FAIL("hA's mapping went away early");
    cx.ops->mem_ipc_close(cx.dev[0], pa, ca);
    if (cx.backend != NULL && ((cpu_backend_t *)cx.backend)->ipc_mappings != NULL)
        CHILD_FAIL("the mapping outlived its last handle");
    t_close(&cx);
    return 0;
}

CTEST(CpuIpc, ChildMapsParentMemory)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "64M", NULL, NULL), HAL_OK);
    hal_device_properties_t props;
    memset(&props, 0, sizeof(props));
    props.struct_size = sizeof(props);
    EXPECT_STATUS(fx.ops->device_get_properties(fx.dev[0], &props), HAL_OK);
    CTEST_EXPECT((props.capabilities & HAL_DEVICE_CAP_IPC) != 0);

    void *a = NULL, *ca = NULL, *b = NULL, *cb = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, BIG + INTERIOR, 0, &a, &ca),
                  HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_DEVICE, SMALL, 0, &b, &cb), HAL_OK);
    if (a == NULL || b == NULL) {
        t_close(&fx);
        return CTEST_FAIL;
    }
    unsigned char *pa = a;
    for (size_t i = 0; i < BIG + INTERIOR; i++)
        pa[i] = pattern(i);
    memset(b, 0x5a, SMALL);

    /* The handle names the interior pointer and the bytes from it to the allocation's end. */
    hal_ipc_handle_t hA, hB;
    hal_backend_ptr_t bpA = t_alloc_ptr(a, ca, BIG + INTERIOR, INTERIOR, HAL_MEM_KIND_DEVICE);
    hal_backend_ptr_t bpB = t_alloc_ptr(b, cb, SMALL, 0, HAL_MEM_KIND_DEVICE);
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &bpA, &hA), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &bpB, &hB), HAL_OK);
    cpu_ipc_record_t rec;
    memcpy(&rec, hA.bytes, sizeof(rec));
    CTEST_EXPECT(rec.magic == CPU_IPC_MAGIC && rec.version == CPU_IPC_VERSION);
    CTEST_EXPECT(rec.pid == (int32_t)getpid() && rec.bytes == BIG);

    /* This process cannot open its own handle. */
    void *p = NULL, *cookie = NULL;
    size_t size = 0;
    t_clear_error();
    EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &hA, &p, &size, &cookie),
                  HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("handle was exported by this process");

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_maps(&hA, &hB, (char *)b - (char *)(pa + INTERIOR)));
    CTEST_EXPECT(pid > 0);
    if (pid > 0)
        CTEST_EXPECT(reap(pid) == 0);

    /* The child's writes landed in this process's device memory. */
    size_t wrong = 0;
    for (size_t i = 0; i < BIG + INTERIOR; i++)
        wrong += pa[i] != (i < INTERIOR ? pattern(i) : 0xc3);
    CTEST_EXPECT(wrong == 0);
    CTEST_EXPECT(((unsigned char *)b)[0] == 0x3c && ((unsigned char *)b)[SMALL - 1] == 0x3c);

    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_DEVICE, a, ca);
    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_DEVICE, b, cb);
    t_close(&fx);
    return CTEST_PASS;
}

/* ---- the parent maps a child's memory, before and after the child is gone ------------------ */

/* Exports a filled allocation to the parent, then waits for a byte before it leaves. With
 * `undumpable`, it first makes itself non-dumpable, which hides its descriptors from processes
 * without CAP_SYS_PTRACE. */
static int child_exports(int handle_fd, int go_fd, bool undumpable)
{
    if (undumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        CHILD_FAIL("prctl(PR_SET_DUMPABLE) failed");
    t_fixture_t cx;
    if (t_open(&cx, "1", "64M", NULL, NULL) != HAL_OK)
        CHILD_FAIL("cannot open a backend of its own");
    void *p = NULL, *c = NULL;
    if (cx.ops->mem_alloc(cx.dev[0], HAL_MEM_KIND_DEVICE, BIG, 0, &p, &c) != HAL_OK)
        CHILD_FAIL("mem_alloc failed");
    memset(p, 0x11, BIG);
    hal_ipc_handle_t h;
    hal_backend_ptr_t bp = t_alloc_ptr(p, c, BIG, 0, HAL_MEM_KIND_DEVICE);
    if (cx.ops->mem_ipc_export(cx.dev[0], &bp, &h) != HAL_OK)
        CHILD_FAIL("mem_ipc_export failed");
    if (!write_all(handle_fd, &h, sizeof(h)))
        CHILD_FAIL("cannot send the handle");
    char go;
    if (!read_all(go_fd, &go, 1))
        CHILD_FAIL("the parent went away");
    cx.ops->mem_free(cx.dev[0], HAL_MEM_KIND_DEVICE, p, c);
    t_close(&cx);
    return 0;
}

/* Starts child_exports and receives its handle. */
static pid_t start_exporter(bool undumpable, hal_ipc_handle_t *h, int *go_fd)
{
    int hp[2], gp[2];
    if (pipe(hp) != 0)
        return -1;
    if (pipe(gp) != 0) {
        close(hp[0]);
        close(hp[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(hp[0]);
        close(gp[1]);
        _exit(child_exports(hp[1], gp[0], undumpable));
    }
    close(hp[1]);
    close(gp[0]);
    if (pid > 0 && !read_all(hp[0], h, sizeof(*h))) {
        close(gp[1]);
        reap(pid);
        pid = -1;
    }
    close(hp[0]);
    if (pid > 0)
        *go_fd = gp[1];
    else
        close(gp[1]);
    return pid;
}

static hal_ipc_handle_t tampered(const hal_ipc_handle_t *h, void (*edit)(cpu_ipc_record_t *))
{
    cpu_ipc_record_t rec;
    memcpy(&rec, h->bytes, sizeof(rec));
    edit(&rec);
    hal_ipc_handle_t out = *h;
    memcpy(out.bytes, &rec, sizeof(rec));
    return out;
}

static void edit_magic(cpu_ipc_record_t *r)
{
    r->magic ^= 1u;
}

static void edit_version(cpu_ipc_record_t *r)
{
    r->version = CPU_IPC_VERSION + 1;
}

static void edit_range(cpu_ipc_record_t *r)
{
    r->bytes = r->arena_size - r->offset + 1;
}

static void edit_pid_to_self(cpu_ipc_record_t *r)
{
    r->pid = (int32_t)getpid();
}

static void edit_inode(cpu_ipc_record_t *r)
{
    r->ino ^= 0x5555;
}

static void edit_fd(cpu_ipc_record_t *r)
{
    r->fd = 1 << 20; /* beyond any descriptor table */
}

CTEST(CpuIpc, StaleMalformedAndForeignHandles)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "64M", NULL, NULL), HAL_OK);
    hal_ipc_handle_t h;
    int go = -1;
    pid_t pid = start_exporter(false, &h, &go);
    CTEST_EXPECT(pid > 0);
    if (pid <= 0) {
        t_close(&fx);
        return CTEST_FAIL;
    }

    /* While the exporter lives, its handle opens (here the parent imports from the child). */
    void *p = NULL, *c = NULL, *p2 = NULL, *c2 = NULL;
    size_t size = 0, size2 = 0;
    EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &h, &p, &size, &c), HAL_OK);
    CTEST_EXPECT(size == BIG);
    CTEST_EXPECT(p != NULL && ((unsigned char *)p)[0] == 0x11 &&
                 ((unsigned char *)p)[BIG - 1] == 0x11);
    EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &h, &p2, &size2, &c2), HAL_OK);
    CTEST_EXPECT(p2 == p && c2 == c);
    if (c2 != NULL)
        fx.ops->mem_ipc_close(fx.dev[0], p2, c2);
    if (c != NULL)
        fx.ops->mem_ipc_close(fx.dev[0], p, c);
    CTEST_EXPECT(((cpu_backend_t *)fx.backend)->ipc_mappings == NULL);

    /* Malformed or self-made handles: invalid arguments, before anything is opened. */
    static const struct {
        void (*edit)(cpu_ipc_record_t *);
        hal_status_t status;
        const char *message;
    } cases[] = {
        { edit_magic, HAL_ERROR_INVALID_ARGUMENT, "not an IPC handle of the cpu backend" },
        { edit_version, HAL_ERROR_INVALID_ARGUMENT, "IPC handle version 2 is not supported" },
        { edit_range, HAL_ERROR_INVALID_ARGUMENT, "malformed IPC handle" },
        { edit_pid_to_self, HAL_ERROR_INVALID_ARGUMENT, "handle was exported by this process" },
        /* A live process, but not the file the handle names: as good as gone. */
        { edit_inode, HAL_ERROR_NOT_FOUND, "exporting process or its memory is gone" },
        { edit_fd, HAL_ERROR_NOT_FOUND, "exporting process or its memory is gone" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hal_ipc_handle_t bad = tampered(&h, cases[i].edit);
        t_clear_error();
        EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &bad, &p, &size, &c), cases[i].status);
        EXPECT_MESSAGE(cases[i].message);
    }
    hal_ipc_handle_t zero;
    memset(&zero, 0, sizeof(zero));
    EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &zero, &p, &size, &c),
                  HAL_ERROR_INVALID_ARGUMENT);

    /* Once the exporter is gone, its handle is not found. */
    CTEST_EXPECT(write_all(go, "x", 1));
    close(go);
    CTEST_EXPECT(reap(pid) == 0);
    t_clear_error();
    EXPECT_STATUS(fx.ops->mem_ipc_open(fx.dev[0], &h, &p, &size, &c), HAL_ERROR_NOT_FOUND);
    EXPECT_MESSAGE("exporting process or its memory is gone");
    CTEST_EXPECT(((cpu_backend_t *)fx.backend)->ipc_mappings == NULL);
    t_close(&fx);
    return CTEST_PASS;
}

/* Whether this process may read other processes' descriptors regardless of dumpability. */
static bool has_cap_sys_ptrace(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return false;
    char line[256];
    unsigned long long caps = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            break;
    }
    fclose(f);
    return (caps >> 19) & 1u; /* CAP_SYS_PTRACE */
}

CTEST(CpuIpc, UndumpableExporterNeedsPtraceRights)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "1", "64M", NULL, NULL), HAL_OK);
    hal_ipc_handle_t h;
    int go = -1;
    pid_t pid = start_exporter(true, &h, &go);
    CTEST_EXPECT(pid > 0);
    if (pid > 0) {
        void *p = NULL, *c = NULL;
        size_t size = 0;
        t_clear_error();
        hal_status_t st = fx.ops->mem_ipc_open(fx.dev[0], &h, &p, &size, &c);
        if (has_cap_sys_ptrace()) {
            EXPECT_STATUS(st, HAL_OK);
            if (st == HAL_OK)
                fx.ops->mem_ipc_close(fx.dev[0], p, c);
        } else {
            EXPECT_STATUS(st, HAL_ERROR_PERMISSION_DENIED);
            EXPECT_MESSAGE("same user and be dumpable");
        }
        CTEST_EXPECT(write_all(go, "x", 1));
        close(go);
        CTEST_EXPECT(reap(pid) == 0);
    }
    t_close(&fx);
    return CTEST_PASS;
}

CTEST(CpuIpc, ExportNamesArenaMemoryOnly)
{
    t_fixture_t fx;
    EXPECT_STATUS(t_open(&fx, "2", "64M", NULL, NULL), HAL_OK);
    void *sh = NULL, *csh = NULL, *pin = NULL, *cpin = NULL, *d1 = NULL, *cd1 = NULL;
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_SHARED, 10000, 0, &sh, &csh), HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, 10000, 0, &pin, &cpin),
                  HAL_OK);
    EXPECT_STATUS(fx.ops->mem_alloc(fx.dev[1], HAL_MEM_KIND_DEVICE, 10000, 0, &d1, &cd1), HAL_OK);
    hal_ipc_handle_t h;
    cpu_ipc_record_t rec;

    /* Shared memory lives in the arena too; the handle counts from the pointer to the end. */
    hal_backend_ptr_t p_sh = t_alloc_ptr(sh, csh, 10000, 999, HAL_MEM_KIND_SHARED);
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &p_sh, &h), HAL_OK);
    memcpy(&rec, h.bytes, sizeof(rec));
    CTEST_EXPECT(rec.bytes == 10000 - 999 && rec.device_index == 0);
    CTEST_EXPECT(rec.offset == (uint64_t)((char *)sh + 999 - arena_base(&fx, 0)));

    /* Pinned memory is not in an arena; another device's memory is not in this one's. */
    hal_backend_ptr_t p_pin = t_alloc_ptr(pin, cpin, 10000, 0, HAL_MEM_KIND_HOST_PINNED);
    t_clear_error();
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &p_pin, &h), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_MESSAGE("is not memory of device 0's arena");
    hal_backend_ptr_t p_d1 = t_alloc_ptr(d1, cd1, 10000, 0, HAL_MEM_KIND_DEVICE);
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[0], &p_d1, &h), HAL_ERROR_INVALID_ARGUMENT);
    EXPECT_STATUS(fx.ops->mem_ipc_export(fx.dev[1], &p_d1, &h), HAL_OK);
    memcpy(&rec, h.bytes, sizeof(rec));
    CTEST_EXPECT(rec.device_index == 1 && rec.bytes == 10000);

    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_SHARED, sh, csh);
    fx.ops->mem_free(fx.dev[0], HAL_MEM_KIND_HOST_PINNED, pin, cpin);
    fx.ops->mem_free(fx.dev[1], HAL_MEM_KIND_DEVICE, d1, cd1);
    t_close(&fx);
    return CTEST_PASS;
}
