/* SPDX-License-Identifier: Apache-2.0 */
/* Tensors and device memory: allocation and 4 KiB accounting, capacity and out-of-memory,
 * read/write/copy/memset with offsets, range and argument checks, the same-core rule for
 * device copies, device addresses the host cannot read, slices, attached buffers, batches and
 * memory statistics. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

static nrt_api_t api;

#define DEV  NRT_TENSOR_PLACEMENT_DEVICE
#define HOST NRT_TENSOR_PLACEMENT_HOST
#define VIRT NRT_TENSOR_PLACEMENT_VIRTUAL

static bool open_with_cores(const char *visible)
{
    if (!nrt_test_open(&api))
        return false;
    setenv("NEURON_RT_VISIBLE_CORES", visible, 1);
    return nrt_test_init(&api) == NRT_SUCCESS;
}

CTEST(nrt_tensor, allocation_is_charged_in_4k_units)
{
    CTEST_CHECK(open_with_cores("0"));
    static const struct {
        size_t size, charged;
    } cases[] = { { 1, 4096 },
                  { 4095, 4096 },
                  { 4096, 4096 },
                  { 4097, 8192 },
                  { 10000, 12288 },
                  { 1 << 20, 1 << 20 },
                  { (1 << 20) + 1, (1 << 20) + 4096 } };
    uint64_t total = 0;
    nrt_tensor_t *t[7] = { 0 };
    for (size_t i = 0; i < 7; i++) {
        CTEST_CHECK(api.tensor_allocate(DEV, 0, cases[i].size, "t", &t[i]) == NRT_SUCCESS);
        CTEST_CHECK(t[i] != NULL);
        CTEST_CHECK(api.tensor_get_size(t[i]) == cases[i].size);
        nrt_tensor_device_allocation_info_t info;
        CTEST_CHECK(api.tensor_get_device_allocation_info(t[i], &info) == NRT_SUCCESS);
        CTEST_CHECK(info.size >= cases[i].size);
        if (nrt_test_is_emulator(&api))
            CTEST_CHECK(info.size == cases[i].charged);
        total += cases[i].charged;
        CTEST_CHECK(nrt_test_used(&api, 0) == total);
    }
    for (size_t i = 0; i < 7; i++) {
        api.tensor_free(&t[i]);
        CTEST_CHECK(t[i] == NULL); /* documented: the pointer is set to NULL */
        total -= cases[i].charged;
        CTEST_CHECK(nrt_test_used(&api, 0) == total);
    }
    nrt_tensor_t *none = NULL;
    api.tensor_free(&none); /* freeing NULL is a no-op */
    api.tensor_free(NULL);
    /* Host tensors do not use device memory. */
    nrt_tensor_t *h = NULL;
    CTEST_CHECK(api.tensor_allocate(VIRT, -1, 1 << 20, "h", &h) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 0);
    nrt_tensor_device_allocation_info_t info;
    CTEST_CHECK(api.tensor_get_device_allocation_info(h, &info) == NRT_INVALID);
    api.tensor_free(&h);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, out_of_device_memory)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("NEURON_EMU_HBM_BYTES is an emulator setting");
    }
    setenv("NEURON_EMU_HBM_BYTES", "1M", 1);
    setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_limit(&api, 0) == 1 << 20 && nrt_test_limit(&api, 1) == 1 << 20);
    nrt_tensor_t *big = NULL, *more = NULL, *other = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, (1 << 20) + 1, "too big", &big) == NRT_RESOURCE);
    CTEST_CHECK(big == NULL && nrt_test_used(&api, 0) == 0);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, (1 << 20) - 4095, "fits", &big) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 1 << 20); /* rounding filled the core */
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 1, "one more", &more) == NRT_RESOURCE);
    CTEST_CHECK(more == NULL);
    CTEST_CHECK(api.tensor_allocate(DEV, 1, 1 << 20, "other core", &other) == NRT_SUCCESS);
    api.tensor_free(&big);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 1, "after free", &more) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 4096);
    nrt_tensor_t *huge = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, SIZE_MAX, "huge", &huge) == NRT_RESOURCE);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, SIZE_MAX - 100, "huge", &huge) == NRT_RESOURCE);
    api.tensor_free(&more);
    api.tensor_free(&other);
    CTEST_CHECK(nrt_test_used(&api, 0) == 0 && nrt_test_used(&api, 1) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static int round_trip(nrt_tensor_placement_t placement, int vnc, size_t size)
{
    nrt_tensor_t *t = NULL;
    CTEST_CHECK(api.tensor_allocate(placement, vnc, size, "rt", &t) == NRT_SUCCESS);
    unsigned char *in = malloc(size), *out = malloc(size);
    CTEST_CHECK(in != NULL && out != NULL);
    nrt_test_pattern(in, size, 7);
    CTEST_CHECK(api.tensor_write(t, in, 0, size) == NRT_SUCCESS);
    memset(out, 0, size);
    CTEST_CHECK(api.tensor_read(t, out, 0, size) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(in, out, size) == 0);
    /* Unaligned pieces at offsets. */
    size_t off = size / 3 + 1, len = size / 4 + 3;
    unsigned char piece[4096];
    CTEST_CHECK(len <= sizeof(piece));
    nrt_test_pattern(piece, len, 11);
    CTEST_CHECK(api.tensor_write(t, piece, off, len) == NRT_SUCCESS);
    memcpy(in + off, piece, len);
    CTEST_CHECK(api.tensor_read(t, out, 0, size) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(in, out, size) == 0);
    memset(out, 0, size);
    CTEST_CHECK(api.tensor_read(t, out, off - 1, len + 2) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(in + off - 1, out, len + 2) == 0);
    CTEST_CHECK(api.tensor_read(t, out, size - 1, 1) == NRT_SUCCESS && out[0] == in[size - 1]);
    CTEST_CHECK(api.tensor_read(t, out, size, 0) == NRT_SUCCESS); /* empty, at the end */
    free(in);
    free(out);
    api.tensor_free(&t);
    return CTEST_PASS;
}

CTEST(nrt_tensor, read_write_round_trips)
{
    CTEST_CHECK(open_with_cores("0-1"));
    CTEST_CHECK(round_trip(DEV, 0, 10007) == CTEST_PASS);
    CTEST_CHECK(round_trip(DEV, 1, 4096) == CTEST_PASS);
    CTEST_CHECK(round_trip(VIRT, -1, 5000) == CTEST_PASS);
    CTEST_CHECK(round_trip(VIRT, 1, 333) == CTEST_PASS);
    CTEST_CHECK(round_trip(HOST, -1, 8192) == CTEST_PASS);
    /* New memory reads as zeros. */
    nrt_tensor_t *t = NULL;
    unsigned char buf[4096];
    CTEST_CHECK(api.tensor_allocate(DEV, 0, sizeof(buf), "z", &t) == NRT_SUCCESS);
    memset(buf, 0x55, sizeof(buf));
    CTEST_CHECK(api.tensor_read(t, buf, 0, sizeof(buf)) == NRT_SUCCESS);
    for (size_t i = 0; i < sizeof(buf); i++)
        CTEST_CHECK(buf[i] == 0);
    api.tensor_free(&t);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, out_of_range_transfers_are_invalid)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *t = NULL, *u = NULL;
    unsigned char buf[256] = { 0 };
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 100, "t", &t) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 50, "u", &u) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t, buf, 0, 101) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, buf, 100, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, buf, 101, 0) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, buf, 1, SIZE_MAX) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, buf, SIZE_MAX, 2) == NRT_INVALID);
    CTEST_CHECK(api.tensor_write(t, buf, 99, 2) == NRT_INVALID);
    CTEST_CHECK(api.tensor_write(t, buf, SIZE_MAX, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_memset(t, 0, 0, 101) == NRT_INVALID);
    CTEST_CHECK(api.tensor_memset(t, UINT64_MAX, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(t, 0, u, 0, 51) == NRT_INVALID);  /* dst too small */
    CTEST_CHECK(api.tensor_copy(u, 10, t, 0, 41) == NRT_INVALID); /* src too small */
    CTEST_CHECK(api.tensor_copy(t, 0, u, 1, 50) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(t, SIZE_MAX, u, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, buf, 0, 100) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_copy(t, 50, u, 0, 50) == NRT_SUCCESS);
    api.tensor_free(&t);
    api.tensor_free(&u);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, null_and_invalid_arguments)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *t = NULL, *x = NULL;
    char buf[16];
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "t", NULL) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 0, "zero", &x) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate((nrt_tensor_placement_t)7, 0, 64, "bad", &x) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(HOST, -1, (4 << 20) + 1, "host", &x) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(VIRT, -2, 64, "v", &x) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(VIRT, 1, 64, "v", &x) == NRT_INVALID);
    CTEST_CHECK(x == NULL);
    CTEST_CHECK(api.tensor_allocate(HOST, -1, 4 << 20, "host", &x) == NRT_SUCCESS);
    api.tensor_free(&x);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, NULL, &t) == NRT_SUCCESS); /* name optional */
    CTEST_CHECK(api.tensor_read(NULL, buf, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(t, NULL, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_write(NULL, buf, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_write(t, NULL, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(NULL, 0, t, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(t, 0, NULL, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_memset(NULL, 0, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_get_size(NULL) == 0);
    CTEST_CHECK(api.tensor_get_va(NULL) == NULL);
    CTEST_CHECK(api.tensor_allocate_slice(NULL, 0, 1, "s", &x) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate_slice(t, 0, 1, "s", NULL) == NRT_INVALID);
    CTEST_CHECK(api.tensor_attach_buffer(NULL, buf, sizeof(buf)) == NRT_INVALID);
    CTEST_CHECK(api.tensor_attach_buffer(t, NULL, sizeof(buf)) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate_empty("e", NULL) == NRT_INVALID);
    nrt_tensor_device_allocation_info_t info;
    CTEST_CHECK(api.tensor_get_device_allocation_info(NULL, &info) == NRT_INVALID);
    CTEST_CHECK(api.tensor_get_device_allocation_info(t, NULL) == NRT_INVALID);
    nrt_vnc_memory_stats_t stats;
    size_t written;
    CTEST_CHECK(api.get_vnc_memory_stats(0, NULL, sizeof(stats), &written) == NRT_INVALID);
    CTEST_CHECK(api.get_vnc_memory_stats(0, &stats, sizeof(stats), NULL) == NRT_INVALID);
    CTEST_CHECK(api.get_vnc_memory_stats(0, &stats, 0, &written) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read_batch(NULL, 1, false) == NRT_INVALID);
    CTEST_CHECK(api.tensor_write_batch(NULL, 1, false) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read_batch(NULL, 0, false) == NRT_SUCCESS);
    api.tensor_free(&t);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, freed_handles_are_rejected)
{
    CTEST_CHECK(open_with_cores("0"));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("using a freed handle is undefined on the real runtime");
    }
    nrt_tensor_t *t = NULL, *keep = NULL;
    char buf[8];
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "t", &t) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 64, "keep", &keep) == NRT_SUCCESS);
    nrt_tensor_t *stale = t;
    api.tensor_free(&t);
    CTEST_CHECK(api.tensor_read(stale, buf, 0, 1) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.tensor_write(stale, buf, 0, 1) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.tensor_copy(keep, 0, stale, 0, 1) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.tensor_memset(stale, 0, 0, 1) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.tensor_attach_buffer(stale, buf, sizeof(buf)) == NRT_INVALID_HANDLE);
    CTEST_CHECK(api.tensor_get_size(stale) == 0 && api.tensor_get_va(stale) == NULL);
    nrt_tensor_t *again = stale;
    api.tensor_free(&again); /* a double free is reported, not fatal */
    CTEST_CHECK(again == NULL);
    CTEST_CHECK(api.tensor_read(keep, buf, 0, 1) == NRT_SUCCESS);
    api.tensor_free(&keep);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, copies_and_the_same_core_rule)
{
    CTEST_CHECK(open_with_cores("0-1"));
    nrt_tensor_t *a = NULL, *b = NULL, *c = NULL, *h = NULL, *h2 = NULL;
    unsigned char in[8192], out[8192];
    nrt_test_pattern(in, sizeof(in), 3);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 8192, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 8192, "b", &b) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 1, 8192, "c", &c) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(VIRT, -1, 8192, "h", &h) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(HOST, -1, 8192, "h2", &h2) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(a, in, 0, sizeof(in)) == NRT_SUCCESS);
    /* Device to device on one core, with offsets. */
    CTEST_CHECK(api.tensor_copy(a, 100, b, 1000, 5000) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(b, out, 1000, 5000) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(out, in + 100, 5000) == 0);
    /* Across cores: refused, and nothing moves. */
    CTEST_CHECK(api.tensor_copy(a, 0, c, 0, 8192) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(c, 0, a, 0, 8192) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(c, out, 0, 16) == NRT_SUCCESS && out[0] == 0 && out[15] == 0);
    /* Through host tensors, any core. */
    CTEST_CHECK(api.tensor_copy(a, 0, h, 0, 8192) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_copy(h, 0, h2, 0, 8192) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_copy(h2, 0, c, 0, 8192) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(c, out, 0, 8192) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(out, in, 8192) == 0);
    /* Overlapping ranges of one tensor behave like memmove. */
    CTEST_CHECK(api.tensor_copy(a, 0, a, 1, 4000) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(a, out, 1, 4000) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(out, in, 4000) == 0);
    api.tensor_free(&a);
    api.tensor_free(&b);
    api.tensor_free(&c);
    api.tensor_free(&h);
    api.tensor_free(&h2);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, memset_with_offsets)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *t = NULL;
    unsigned char out[300];
    CTEST_CHECK(api.tensor_allocate(DEV, 0, sizeof(out), "m", &t) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(t, 0, 0x11, sizeof(out)) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(t, 17, 0xab, 100) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(t, 200, 0x1ff, 10) == NRT_SUCCESS); /* a byte value */
    CTEST_CHECK(api.tensor_memset(t, 300, 0, 0) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(t, out, 0, sizeof(out)) == NRT_SUCCESS);
    for (size_t i = 0; i < sizeof(out); i++) {
        unsigned char want = (i >= 17 && i < 117) ? 0xab : (i >= 200 && i < 210) ? 0xff : 0x11;
        CTEST_CHECK(out[i] == want);
    }
    api.tensor_free(&t);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static int touch(void *arg)
{
    /* Let the kernel's default action run even under a sanitizer's SIGSEGV handler. */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    volatile unsigned char *p = arg;
    return p[0] == 0x5a ? 3 : 4;
}

CTEST(nrt_tensor, device_addresses_are_not_host_memory)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *a = NULL, *b = NULL, *h = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 8192, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 100, "b", &b) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(VIRT, -1, 64, "h", &h) == NRT_SUCCESS);
    unsigned char *va = api.tensor_get_va(a), *vb = api.tensor_get_va(b);
    CTEST_CHECK(va != NULL && vb != NULL);
    CTEST_CHECK(vb + 100 <= va || va + 8192 <= vb); /* distinct ranges */
    unsigned char pattern[8192];
    memset(pattern, 0x5a, sizeof(pattern));
    CTEST_CHECK(api.tensor_write(a, pattern, 0, sizeof(pattern)) == NRT_SUCCESS);
    if (nrt_test_is_emulator(&api)) {
        /* The kernel refuses to read it (no signal needed to tell)... */
        int fds[2];
        CTEST_CHECK(pipe(fds) == 0);
        errno = 0;
        CTEST_CHECK(write(fds[1], va, 1) == -1 && errno == EFAULT);
        CTEST_CHECK(write(fds[1], va + 4096, 1) == -1 && errno == EFAULT);
        close(fds[0]);
        close(fds[1]);
        /* ...and a dereference kills the process with SIGSEGV. */
        CTEST_CHECK(nrt_test_in_child(touch, va) == 128 + SIGSEGV);
        CTEST_CHECK(nrt_test_in_child(touch, va + 8191) == 128 + SIGSEGV);
    }
    /* A host tensor's address is its memory. */
    unsigned char *vh = api.tensor_get_va(h);
    CTEST_CHECK(vh != NULL);
    CTEST_CHECK(api.tensor_write(h, pattern, 0, 64) == NRT_SUCCESS);
    CTEST_CHECK(vh[0] == 0x5a && vh[63] == 0x5a);
    vh[5] = 7;
    unsigned char out[8];
    CTEST_CHECK(api.tensor_read(h, out, 0, 8) == NRT_SUCCESS && out[5] == 7);
    api.tensor_free(&a);
    api.tensor_free(&b);
    api.tensor_free(&h);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, slices_share_reference_counted_storage)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *src = NULL, *s = NULL, *ss = NULL, *bad = NULL;
    unsigned char in[10000], out[10000];
    nrt_test_pattern(in, sizeof(in), 5);
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 10000, "src", &src) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_write(src, in, 0, sizeof(in)) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate_slice(src, 1000, 5000, "s", &s) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_get_size(s) == 5000);
    CTEST_CHECK((unsigned char *)api.tensor_get_va(s) ==
                (unsigned char *)api.tensor_get_va(src) + 1000);
    CTEST_CHECK(api.tensor_read(s, out, 0, 5000) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(out, in + 1000, 5000) == 0);
    CTEST_CHECK(api.tensor_read(s, out, 0, 5001) == NRT_INVALID); /* bounded by the slice */
    CTEST_CHECK(api.tensor_allocate_slice(s, 100, 200, "ss", &ss) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_memset(ss, 0, 0xee, 200) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_read(src, out, 1100, 200) == NRT_SUCCESS && out[0] == 0xee &&
                out[199] == 0xee);
    CTEST_CHECK(api.tensor_allocate_slice(src, 9000, 1001, "bad", &bad) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate_slice(src, 10001, 0, "bad", &bad) == NRT_INVALID);
    CTEST_CHECK(bad == NULL);
    CTEST_CHECK(nrt_test_used(&api, 0) == 12288); /* slices allocate nothing */
    api.tensor_free(&src);
    CTEST_CHECK(nrt_test_used(&api, 0) == 12288); /* still used by the slices */
    CTEST_CHECK(api.tensor_read(s, out, 0, 10) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(out, in + 1000, 10) == 0);
    api.tensor_free(&s);
    CTEST_CHECK(nrt_test_used(&api, 0) == 12288);
    api.tensor_free(&ss);
    CTEST_CHECK(nrt_test_used(&api, 0) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, attached_buffers_and_empty_tensors)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *e = NULL, *d = NULL;
    unsigned char *buffer = calloc(1, 4096);
    unsigned char out[16];
    CTEST_CHECK(buffer != NULL);
    CTEST_CHECK(api.tensor_allocate_empty("e", &e) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_get_size(e) == 0 && api.tensor_get_va(e) == NULL);
    CTEST_CHECK(api.tensor_read(e, out, 0, 1) == NRT_INVALID);
    CTEST_CHECK(api.tensor_attach_buffer(e, buffer, 4096) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_get_size(e) == 4096 && api.tensor_get_va(e) == buffer);
    CTEST_CHECK(api.tensor_memset(e, 10, 0x42, 3) == NRT_SUCCESS);
    CTEST_CHECK(buffer[10] == 0x42 && buffer[12] == 0x42 && buffer[13] == 0);
    buffer[100] = 9;
    CTEST_CHECK(api.tensor_read(e, out, 100, 1) == NRT_SUCCESS && out[0] == 9);
    /* Attaching to a device tensor releases its device memory and makes it a host tensor. */
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 8192, "d", &d) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 8192);
    CTEST_CHECK(api.tensor_attach_buffer(d, buffer, 2048) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_used(&api, 0) == 0);
    CTEST_CHECK(api.tensor_get_size(d) == 2048);
    nrt_tensor_device_allocation_info_t info;
    CTEST_CHECK(api.tensor_get_device_allocation_info(d, &info) == NRT_INVALID);
    CTEST_CHECK(api.tensor_copy(d, 0, e, 2048, 2048) == NRT_SUCCESS);
    api.tensor_free(&e);
    api.tensor_free(&d);
    CTEST_CHECK(buffer[2048 + 10] == 0x42); /* the caller's buffer outlives the tensors */
    free(buffer);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, batched_reads_and_writes)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *a = NULL, *b = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 4096, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(VIRT, -1, 4096, "b", &b) == NRT_SUCCESS);
    unsigned char x[100], y[50], z[70], rx[100], ry[50], rz[70];
    nrt_test_pattern(x, sizeof(x), 1);
    nrt_test_pattern(y, sizeof(y), 2);
    nrt_test_pattern(z, sizeof(z), 3);
    nrt_tensor_batch_op_t wa[2] = { { 0, sizeof(x), x }, { 1000, sizeof(y), y } };
    nrt_tensor_batch_op_t wb[1] = { { 4026, sizeof(z), z } };
    nrt_tensor_batch_t writes[2] = { { a, wa, 2 }, { b, wb, 1 } };
    CTEST_CHECK(api.tensor_write_batch(writes, 2, false) == NRT_SUCCESS);
    nrt_tensor_batch_op_t ra[2] = { { 0, sizeof(rx), rx }, { 1000, sizeof(ry), ry } };
    nrt_tensor_batch_op_t rb[1] = { { 4026, sizeof(rz), rz } };
    nrt_tensor_batch_t reads[2] = { { a, ra, 2 }, { b, rb, 1 } };
    CTEST_CHECK(api.tensor_read_batch(reads, 2, true) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(x, rx, sizeof(x)) == 0 && memcmp(y, ry, sizeof(y)) == 0 &&
                memcmp(z, rz, sizeof(z)) == 0);
    /* One bad entry: the batch is refused before anything moves. */
    unsigned char fresh[100];
    nrt_test_pattern(fresh, sizeof(fresh), 9);
    nrt_tensor_batch_op_t bad[2] = { { 0, sizeof(fresh), fresh }, { 4090, 7, fresh } };
    nrt_tensor_batch_t badw[1] = { { a, bad, 2 } };
    CTEST_CHECK(api.tensor_write_batch(badw, 1, false) == NRT_INVALID);
    CTEST_CHECK(api.tensor_read(a, rx, 0, sizeof(rx)) == NRT_SUCCESS);
    CTEST_CHECK(memcmp(x, rx, sizeof(x)) == 0);
    nrt_tensor_batch_op_t nullbuf[1] = { { 0, 1, NULL } };
    nrt_tensor_batch_t nb[1] = { { a, nullbuf, 1 } };
    CTEST_CHECK(api.tensor_read_batch(nb, 1, false) == NRT_INVALID);
    nrt_tensor_batch_t nt[1] = { { NULL, ra, 1 } };
    CTEST_CHECK(api.tensor_read_batch(nt, 1, false) == NRT_INVALID);
    api.tensor_free(&a);
    api.tensor_free(&b);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_tensor, memory_stats_are_versioned)
{
    CTEST_CHECK(open_with_cores("0"));
    nrt_tensor_t *t = NULL;
    CTEST_CHECK(api.tensor_allocate(DEV, 0, 5000, "t", &t) == NRT_SUCCESS);
    nrt_vnc_memory_stats_t stats;
    size_t written = 0;
    CTEST_CHECK(api.get_vnc_memory_stats(0, &stats, sizeof(stats), &written) == NRT_SUCCESS);
    CTEST_CHECK(written == sizeof(stats) && stats.bytes_used == 8192);
    CTEST_CHECK(stats.bytes_limit >= stats.bytes_used);
    /* An older caller knowing only bytes_used. */
    unsigned char small[16];
    memset(small, 0xcd, sizeof(small));
    CTEST_CHECK(api.get_vnc_memory_stats(0, (nrt_vnc_memory_stats_t *)(void *)small, 8, &written) ==
                NRT_SUCCESS);
    CTEST_CHECK(written == 8 && small[8] == 0xcd);
    /* A newer, larger caller gets what exists. */
    unsigned char large[64];
    CTEST_CHECK(api.get_vnc_memory_stats(0, (nrt_vnc_memory_stats_t *)(void *)large, sizeof(large),
                                         &written) == NRT_SUCCESS);
    CTEST_CHECK(written == sizeof(nrt_vnc_memory_stats_t));
    api.tensor_free(&t);
    nrt_test_close(&api);
    return CTEST_PASS;
}
