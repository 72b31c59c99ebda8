/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: tensors and device memory.
 *
 * A tensor is a view (offset, size) of a reference-counted storage. Slices share their source's
 * storage; the storage, and the device memory it holds, goes away with the last tensor using
 * it. nrt_tensor_attach_buffer swaps in a caller-owned storage and makes the tensor VIRTUAL.
 *
 * Device memory: each allocation is rounded up to 4 KiB and charged to its logical core, whose
 * limit is the core's share of HBM; a request beyond it fails with NRT_RESOURCE. The address
 * nrt_tensor_get_va reports is a PROT_NONE reservation of the rounded size, so the host faults
 * if it dereferences a device address; the bytes live in a separate host mapping that the
 * emulator copies through. Host tensors (HOST, VIRTUAL) are plain host memory and their address
 * is dereferenceable. New memory reads as zeros.
 *
 * Handles: every live tensor is in a registry, so a freed or foreign pointer is reported as
 * NRT_INVALID_HANDLE instead of being dereferenced. Calls on different tensors run in
 * parallel; a transfer holds a reference on its storage, so freeing a tensor (or a slice's
 * source) while another thread copies through it is safe. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

#define TENSOR_NAME_LEN 64

struct emu_storage {
    atomic_uint refs;
    nrt_tensor_placement_t placement; /* DEVICE, HOST or VIRTUAL */
    int vnc;                          /* visible core; -1 for host memory not tied to one */
    uint32_t chip;                    /* device of a DEVICE storage (DMA timeline) */
    unsigned char *va;                /* reported address (reservation for DEVICE) */
    unsigned char *data;              /* the bytes */
    size_t length;                    /* usable bytes */
    size_t mapped;                    /* mapping length of va/data, 0 if caller-owned */
    size_t charged;                   /* bytes charged to vnc (DEVICE only) */
};

struct nrt_tensor {
    emu_storage_t *storage; /* NULL: empty tensor */
    size_t offset;          /* into storage */
    size_t size;
    char name[TENSOR_NAME_LEN];
};

/* ---- Handle registry: open-addressing set of live tensors, under reg_lock ---- */

#define REG_TOMBSTONE ((struct nrt_tensor *)(uintptr_t)1)

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    struct nrt_tensor **slot;
    size_t cap;  /* power of two, or 0 */
    size_t used; /* live + tombstones */
    size_t live;
} reg;

static size_t reg_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return (size_t)x;
}

static bool reg_find(const void *t, size_t *index)
{
    if (reg.cap == 0 || t == NULL || t == REG_TOMBSTONE)
        return false;
    for (size_t i = reg_hash(t) & (reg.cap - 1);; i = (i + 1) & (reg.cap - 1)) {
        if (reg.slot[i] == NULL)
            return false;
        if (reg.slot[i] == t) {
            *index = i;
            return true;
        }
    }
}

static bool reg_insert(struct nrt_tensor *t)
{
    if ((reg.used + 1) * 4 > reg.cap * 3) {
        size_t cap = reg.cap == 0 ? 64 : reg.cap;
        while ((reg.live + 1) * 2 > cap)
            cap *= 2;
        struct nrt_tensor **slot = calloc(cap, sizeof(*slot));
        if (slot == NULL)
            return false;
        for (size_t i = 0; i < reg.cap; i++) {
            struct nrt_tensor *old = reg.slot[i];
            if (old == NULL || old == REG_TOMBSTONE)
                continue;
            size_t j = reg_hash(old) & (cap - 1);
            while (slot[j] != NULL)
                j = (j + 1) & (cap - 1);
            slot[j] = old;
        }
        free(reg.slot);
        reg.slot = slot;
        reg.cap = cap;
        reg.used = reg.live;
    }
    size_t i = reg_hash(t) & (reg.cap - 1);
    while (reg.slot[i] != NULL && reg.slot[i] != REG_TOMBSTONE)
        i = (i + 1) & (reg.cap - 1);
    if (reg.slot[i] == NULL)
        reg.used++;
    reg.slot[i] = t;
    reg.live++;
    return true;
}

static void reg_remove(size_t index)
{
    reg.slot[index] = REG_TOMBSTONE;
    reg.live--;
}

void emu_tensors_lock_for_fork(void)
{
    pthread_mutex_lock(&reg_lock);
}

void emu_tensors_unlock_after_fork(void)
{
    pthread_mutex_unlock(&reg_lock);
}

/* ---- Storage ---- */

static void storage_destroy(emu_storage_t *st)
{
    if (st->charged != 0)
        atomic_fetch_sub(&emu_rt.vnc[st->vnc].used, st->charged);
    if (st->mapped != 0) {
        if (st->va != st->data)
            munmap(st->va, st->mapped);
        munmap(st->data, st->mapped);
    }
    free(st);
}

static void storage_unref(emu_storage_t *st)
{
    if (st != NULL && atomic_fetch_sub(&st->refs, 1) == 1)
        storage_destroy(st);
}

/* Charges bytes to visible core vnc unless that exceeds its limit. */
static bool charge(int vnc, uint64_t bytes)
{
    emu_vnc_t *core = &emu_rt.vnc[vnc];
    uint64_t used = atomic_load(&core->used);
    do {
        if (bytes > core->limit || used > core->limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak(&core->used, &used, used + bytes));
    return true;
}

static void *map_anonymous(size_t len, int prot)
{
    void *p = mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static NRT_STATUS storage_create(const char *api, const char *name,
                                 nrt_tensor_placement_t placement, int vnc, size_t size,
                                 emu_storage_t **out)
{
    if (size > SIZE_MAX - (EMU_PAGE_SIZE - 1)) {
        EMU_ERR(api, "size %zu cannot be allocated", size);
        return NRT_RESOURCE;
    }
    size_t rounded = (size + EMU_PAGE_SIZE - 1) & ~(EMU_PAGE_SIZE - 1);
    emu_storage_t *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        EMU_ERR(api, "out of host memory");
        return NRT_RESOURCE;
    }
    atomic_init(&st->refs, 1);
    st->placement = placement;
    st->vnc = vnc;
    st->length = size;
    if (placement == NRT_TENSOR_PLACEMENT_DEVICE) {
        if (!charge(vnc, rounded)) {
            EMU_ERR(api,
                    "out of device memory on NeuronCore %d: tensor \"%s\" needs %zu bytes "
                    "(%zu after rounding to 4 KiB), %llu of %llu bytes in use",
                    vnc, name != NULL ? name : "", size, rounded,
                    (unsigned long long)atomic_load(&emu_rt.vnc[vnc].used),
                    (unsigned long long)emu_rt.vnc[vnc].limit);
            free(st);
            return NRT_RESOURCE;
        }
        st->charged = rounded;
        st->chip = (emu_rt.first_vnc + (uint32_t)vnc) / emu_rt.platform.vnc_per_chip;
        st->va = map_anonymous(rounded, PROT_NONE);
        st->data = map_anonymous(rounded, PROT_READ | PROT_WRITE);
    } else {
        st->data = map_anonymous(rounded, PROT_READ | PROT_WRITE);
        st->va = st->data;
    }
    st->mapped = rounded;
    if (st->va == NULL || st->data == NULL) {
        EMU_ERR(api, "cannot map %zu bytes of host memory to back the tensor", rounded);
        if (st->va != NULL && st->va != st->data)
            munmap(st->va, rounded);
        if (st->data != NULL)
            munmap(st->data, rounded);
        st->mapped = 0;
        storage_destroy(st);
        return NRT_RESOURCE;
    }
    *out = st;
    return NRT_SUCCESS;
}

/* ---- Views: a snapshot of a tensor, holding a reference on its storage ---- */

static nrt_tensor_placement_t view_placement(const emu_view_t *v)
{
    return v->st != NULL ? v->st->placement : NRT_TENSOR_PLACEMENT_VIRTUAL;
}

nrt_tensor_placement_t emu_view_placement(const emu_view_t *v)
{
    return view_placement(v);
}

int emu_view_vnc(const emu_view_t *v)
{
    return v->st != NULL ? v->st->vnc : -1;
}

bool emu_views_overlap(const emu_view_t *a, const emu_view_t *b)
{
    if (a->st == NULL || a->st != b->st)
        return false;
    return a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

/* Caller holds reg_lock. */
static NRT_STATUS emu_view_take_locked(const char *api, const char *what, const nrt_tensor_t *t,
                                       emu_view_t *v)
{
    size_t index;
    if (!reg_find(t, &index)) {
        EMU_ERR(api, "%s %p is not a live tensor (freed, or not from this runtime)", what,
                (const void *)t);
        return NRT_INVALID_HANDLE;
    }
    v->st = t->storage;
    v->offset = t->offset;
    v->size = t->size;
    if (v->st != NULL)
        atomic_fetch_add(&v->st->refs, 1);
    return NRT_SUCCESS;
}

NRT_STATUS emu_view_take(const char *api, const char *what, const nrt_tensor_t *t, emu_view_t *v)
{
    if (t == NULL) {
        EMU_ERR(api, "%s is NULL", what);
        return NRT_INVALID;
    }
    pthread_mutex_lock(&reg_lock);
    NRT_STATUS status = emu_view_take_locked(api, what, t, v);
    pthread_mutex_unlock(&reg_lock);
    return status;
}

void emu_view_put(emu_view_t *v)
{
    storage_unref(v->st);
    v->st = NULL;
}

/* [offset, offset + size) must lie inside the view, which must have storage. */
NRT_STATUS emu_view_check_range(const char *api, const char *what, const emu_view_t *v,
                                uint64_t offset, uint64_t size)
{
    if (v->st == NULL) {
        EMU_ERR(api, "%s has no storage (nrt_tensor_allocate_empty without attach)", what);
        return NRT_INVALID;
    }
    if (offset > v->size || size > v->size - offset) {
        EMU_ERR(api, "%s: offset %llu + size %llu is outside the tensor's %zu bytes", what,
                (unsigned long long)offset, (unsigned long long)size, v->size);
        return NRT_INVALID;
    }
    return NRT_SUCCESS;
}

unsigned char *emu_view_bytes(const emu_view_t *v, uint64_t offset)
{
    return v->st->data + v->offset + offset;
}

static uint64_t view_dma_begin(const emu_view_t *v, uint64_t bytes)
{
    return view_placement(v) == NRT_TENSOR_PLACEMENT_DEVICE ? emu_dma_begin(v->st->chip, bytes) : 0;
}

/* ---- Tensor objects ---- */

static NRT_STATUS tensor_publish(const char *api, emu_storage_t *st, size_t offset, size_t size,
                                 const char *name, nrt_tensor_t **out)
{
    struct nrt_tensor *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        EMU_ERR(api, "out of host memory");
        storage_unref(st);
        return NRT_RESOURCE;
    }
    t->storage = st;
    t->offset = offset;
    t->size = size;
    if (name != NULL)
        strncpy(t->name, name, sizeof(t->name) - 1);
    pthread_mutex_lock(&reg_lock);
    bool ok = reg_insert(t);
    pthread_mutex_unlock(&reg_lock);
    if (!ok) {
        EMU_ERR(api, "out of host memory");
        storage_unref(st);
        free(t);
        return NRT_RESOURCE;
    }
    *out = t;
    return NRT_SUCCESS;
}

void emu_tensors_release_all(void)
{
    size_t leaked = 0;
    for (size_t i = 0; i < reg.cap; i++) {
        struct nrt_tensor *t = reg.slot[i];
        if (t == NULL || t == REG_TOMBSTONE)
            continue;
        storage_unref(t->storage);
        free(t);
        leaked++;
    }
    free(reg.slot);
    memset(&reg, 0, sizeof(reg));
    if (leaked != 0)
        EMU_INFO("nrt_close", "freed %zu tensors that were still allocated", leaked);
}

/* ---- API ---- */

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc,
                                              size_t size, const char *name, nrt_tensor_t **tensor)
{
    static const char *const api = "nrt_tensor_allocate";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (tensor == NULL) {
        EMU_ERR(api, "tensor is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    int cores = (int)emu_rt.vnc_count;
    status = NRT_INVALID;
    if (tensor_placement != NRT_TENSOR_PLACEMENT_DEVICE &&
        tensor_placement != NRT_TENSOR_PLACEMENT_HOST &&
        tensor_placement != NRT_TENSOR_PLACEMENT_VIRTUAL) {
        EMU_ERR(api, "placement %d is not a valid nrt_tensor_placement_t", (int)tensor_placement);
    } else if (size == 0) {
        EMU_ERR(api, "size is 0");
    } else if (tensor_placement == NRT_TENSOR_PLACEMENT_DEVICE && (vnc < 0 || vnc >= cores)) {
        EMU_ERR(api, "NeuronCore %d is not visible to this process (visible: 0-%d)", vnc,
                cores - 1);
    } else if (tensor_placement != NRT_TENSOR_PLACEMENT_DEVICE && (vnc < -1 || vnc >= cores)) {
        EMU_ERR(api, "NeuronCore %d is neither -1 nor visible (0-%d)", vnc, cores - 1);
    } else if (tensor_placement == NRT_TENSOR_PLACEMENT_HOST && size > EMU_HOST_PLACEMENT_MAX) {
        EMU_ERR(api, "NRT_TENSOR_PLACEMENT_HOST tensors are limited to 4 MB, %zu requested", size);
    } else {
        status = emu_fault_hit(EMU_FAULT_ALLOC);
        if (status != NRT_SUCCESS)
            EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
    }
    emu_storage_t *st = NULL;
    if (status == NRT_SUCCESS)
        status = storage_create(api, name, tensor_placement, vnc, size, &st);
    if (status == NRT_SUCCESS)
        status = tensor_publish(api, st, 0, size, name, tensor);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT void nrt_tensor_free(nrt_tensor_t **tensor)
{
    static const char *const api = "nrt_tensor_free";
    if (tensor == NULL) {
        EMU_ERR(api, "tensor is NULL");
        return;
    }
    if (*tensor == NULL)
        return;
    if (emu_enter(api) == NRT_SUCCESS) {
        struct nrt_tensor *t = NULL;
        size_t index;
        pthread_mutex_lock(&reg_lock);
        if (reg_find(*tensor, &index)) {
            t = reg.slot[index];
            reg_remove(index);
        }
        pthread_mutex_unlock(&reg_lock);
        if (t != NULL) {
            storage_unref(t->storage);
            free(t);
        } else {
            EMU_ERR(api, "%p is not a live tensor (double free?)", (void *)*tensor);
        }
        emu_leave();
    }
    *tensor = NULL;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset,
                                          size_t size)
{
    static const char *const api = "nrt_tensor_read";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    emu_view_t v = { 0 };
    status = emu_view_take(api, "tensor", tensor, &v);
    if (status == NRT_SUCCESS && buf == NULL) {
        EMU_ERR(api, "buf is NULL");
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "tensor", &v, offset, size);
    if (status == NRT_SUCCESS) {
        status = emu_fault_hit(EMU_FAULT_READ);
        if (status != NRT_SUCCESS)
            EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
    }
    if (status == NRT_SUCCESS) {
        uint64_t deadline = view_dma_begin(&v, size);
        memcpy(buf, emu_view_bytes(&v, offset), size);
        emu_dma_end(deadline);
    }
    emu_view_put(&v);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset,
                                           size_t size)
{
    static const char *const api = "nrt_tensor_write";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    emu_view_t v = { 0 };
    status = emu_view_take(api, "tensor", tensor, &v);
    if (status == NRT_SUCCESS && buf == NULL) {
        EMU_ERR(api, "buf is NULL");
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "tensor", &v, offset, size);
    if (status == NRT_SUCCESS) {
        status = emu_fault_hit(EMU_FAULT_WRITE);
        if (status != NRT_SUCCESS)
            EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
    }
    if (status == NRT_SUCCESS) {
        uint64_t deadline = view_dma_begin(&v, size);
        memcpy(emu_view_bytes(&v, offset), buf, size);
        emu_dma_end(deadline);
    }
    emu_view_put(&v);
    emu_leave();
    return status;
}

/* Batched transfers: every entry is checked before any data moves; then the entries run in
 * order and the first injected fault stops the batch (earlier entries have completed). */
static NRT_STATUS tensor_batch(const char *api, const nrt_tensor_batch_t *batches,
                               uint64_t num_batches, bool write)
{
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (num_batches != 0 && batches == NULL) {
        EMU_ERR(api, "batches is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    emu_view_t *views = NULL;
    if (num_batches != 0 && num_batches <= SIZE_MAX / sizeof(*views))
        views = calloc((size_t)num_batches, sizeof(*views));
    if (num_batches != 0 && views == NULL) {
        EMU_ERR(api, "out of host memory for %llu batches", (unsigned long long)num_batches);
        emu_leave();
        return NRT_RESOURCE;
    }
    uint64_t taken = 0;
    for (; status == NRT_SUCCESS && taken < num_batches; taken++) {
        const nrt_tensor_batch_t *b = &batches[taken];
        status = emu_view_take(api, "batch tensor", b->tensor, &views[taken]);
        if (status == NRT_SUCCESS && b->num_ops != 0 && b->ops == NULL) {
            EMU_ERR(api, "batch %llu: ops is NULL", (unsigned long long)taken);
            status = NRT_INVALID;
        }
        for (uint32_t i = 0; status == NRT_SUCCESS && i < b->num_ops; i++) {
            if (b->ops[i].buffer == NULL) {
                EMU_ERR(api, "batch %llu op %u: buffer is NULL", (unsigned long long)taken, i);
                status = NRT_INVALID;
            } else {
                status = emu_view_check_range(api, "batch tensor", &views[taken], b->ops[i].offset,
                                              b->ops[i].size);
            }
        }
    }
    for (uint64_t n = 0; status == NRT_SUCCESS && n < num_batches; n++) {
        const nrt_tensor_batch_t *b = &batches[n];
        for (uint32_t i = 0; status == NRT_SUCCESS && i < b->num_ops; i++) {
            const nrt_tensor_batch_op_t *op = &b->ops[i];
            status = emu_fault_hit(write ? EMU_FAULT_WRITE : EMU_FAULT_READ);
            if (status != NRT_SUCCESS) {
                EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
                break;
            }
            uint64_t deadline = view_dma_begin(&views[n], op->size);
            if (write)
                memcpy(emu_view_bytes(&views[n], op->offset), op->buffer, op->size);
            else
                memcpy(op->buffer, emu_view_bytes(&views[n], op->offset), op->size);
            emu_dma_end(deadline);
        }
    }
    for (uint64_t n = 0; n < taken; n++)
        emu_view_put(&views[n]);
    free(views);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_read_batch(const nrt_tensor_batch_t *batches,
                                                uint64_t num_batches, bool unsafe)
{
    return tensor_batch("nrt_tensor_read_batch", batches, num_batches, false);
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_write_batch(const nrt_tensor_batch_t *batches,
                                                 uint64_t num_batches, bool unsafe)
{
    return tensor_batch("nrt_tensor_write_batch", batches, num_batches, true);
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_copy(const nrt_tensor_t *src, size_t src_offset,
                                          nrt_tensor_t *dst, size_t dst_offset, size_t size)
{
    static const char *const api = "nrt_tensor_copy";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (src == NULL || dst == NULL) {
        EMU_ERR(api, "src or dst is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    emu_view_t s = { 0 }, d = { 0 };
    pthread_mutex_lock(&reg_lock);
    status = emu_view_take_locked(api, "src", src, &s);
    if (status == NRT_SUCCESS)
        status = emu_view_take_locked(api, "dst", dst, &d);
    pthread_mutex_unlock(&reg_lock);
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "src", &s, src_offset, size);
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "dst", &d, dst_offset, size);
    if (status == NRT_SUCCESS && view_placement(&s) == NRT_TENSOR_PLACEMENT_DEVICE &&
        view_placement(&d) == NRT_TENSOR_PLACEMENT_DEVICE && s.st->vnc != d.st->vnc) {
        EMU_ERR(api,
                "device tensors on NeuronCores %d and %d: a device-to-device copy must stay on "
                "one NeuronCore",
                s.st->vnc, d.st->vnc);
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS) {
        status = emu_fault_hit(EMU_FAULT_COPY);
        if (status != NRT_SUCCESS)
            EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
    }
    if (status == NRT_SUCCESS) {
        uint64_t deadline = view_dma_begin(&s, size);
        if (deadline == 0)
            deadline = view_dma_begin(&d, size);
        memmove(emu_view_bytes(&d, dst_offset), emu_view_bytes(&s, src_offset), size);
        emu_dma_end(deadline);
    }
    emu_view_put(&s);
    emu_view_put(&d);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT size_t nrt_tensor_get_size(const nrt_tensor_t *tensor)
{
    static const char *const api = "nrt_tensor_get_size";
    if (emu_enter(api) != NRT_SUCCESS)
        return 0;
    emu_view_t v = { 0 };
    size_t size = emu_view_take(api, "tensor", tensor, &v) == NRT_SUCCESS ? v.size : 0;
    emu_view_put(&v);
    emu_leave();
    return size;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_memset(nrt_tensor_t *tensor, uint64_t offset, int value,
                                            size_t size)
{
    static const char *const api = "nrt_tensor_memset";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    emu_view_t v = { 0 };
    status = emu_view_take(api, "tensor", tensor, &v);
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "tensor", &v, offset, size);
    if (status == NRT_SUCCESS) {
        status = emu_fault_hit(EMU_FAULT_MEMSET);
        if (status != NRT_SUCCESS)
            EMU_ERR(api, "injected fault: %s", nrt_get_status_as_str(status));
    }
    if (status == NRT_SUCCESS) {
        uint64_t deadline = view_dma_begin(&v, size);
        memset(emu_view_bytes(&v, offset), value, size);
        emu_dma_end(deadline);
    }
    emu_view_put(&v);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_allocate_empty(const char *name, nrt_tensor_t **tensor)
{
    static const char *const api = "nrt_tensor_allocate_empty";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (tensor == NULL) {
        EMU_ERR(api, "tensor is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    status = tensor_publish(api, NULL, 0, 0, name, tensor);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_attach_buffer(nrt_tensor_t *tensor, void *buffer, size_t size)
{
    static const char *const api = "nrt_tensor_attach_buffer";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (tensor == NULL || buffer == NULL || size == 0) {
        EMU_ERR(api, "tensor or buffer is NULL, or size is 0");
        emu_leave();
        return NRT_INVALID;
    }
    emu_storage_t *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        EMU_ERR(api, "out of host memory");
        emu_leave();
        return NRT_RESOURCE;
    }
    atomic_init(&st->refs, 1);
    st->placement = NRT_TENSOR_PLACEMENT_VIRTUAL;
    st->vnc = -1;
    st->va = buffer;
    st->data = buffer;
    st->length = size;

    emu_storage_t *old = NULL;
    size_t index;
    pthread_mutex_lock(&reg_lock);
    if (reg_find(tensor, &index)) {
        old = tensor->storage;
        tensor->storage = st;
        tensor->offset = 0;
        tensor->size = size;
        st = NULL;
    }
    pthread_mutex_unlock(&reg_lock);
    if (st != NULL) {
        EMU_ERR(api, "tensor %p is not a live tensor (freed, or not from this runtime)",
                (void *)tensor);
        free(st);
        status = NRT_INVALID_HANDLE;
    }
    storage_unref(old);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t *tensor_source,
                                                    size_t offset, size_t size, const char *name,
                                                    nrt_tensor_t **tensor_slice)
{
    static const char *const api = "nrt_tensor_allocate_slice";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (tensor_slice == NULL) {
        EMU_ERR(api, "tensor_slice is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    emu_view_t v = { 0 };
    status = emu_view_take(api, "tensor_source", tensor_source, &v);
    if (status == NRT_SUCCESS && size == 0) {
        EMU_ERR(api, "size is 0");
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, "tensor_source", &v, offset, size);
    if (status == NRT_SUCCESS) {
        /* The view's reference becomes the slice's. */
        status = tensor_publish(api, v.st, v.offset + offset, size, name, tensor_slice);
        v.st = NULL;
    }
    emu_view_put(&v);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT void *nrt_tensor_get_va(const nrt_tensor_t *tensor)
{
    static const char *const api = "nrt_tensor_get_va";
    if (emu_enter(api) != NRT_SUCCESS)
        return NULL;
    emu_view_t v = { 0 };
    void *va = NULL;
    if (emu_view_take(api, "tensor", tensor, &v) == NRT_SUCCESS) {
        if (v.st != NULL)
            va = v.st->va + v.offset;
        else
            EMU_ERR(api, "the tensor has no storage");
    }
    emu_view_put(&v);
    emu_leave();
    return va;
}

NRT_EMU_EXPORT NRT_STATUS nrt_tensor_get_device_allocation_info(
    const nrt_tensor_t *tensor, nrt_tensor_device_allocation_info_t *alloc_info)
{
    static const char *const api = "nrt_tensor_get_device_allocation_info";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (alloc_info == NULL) {
        EMU_ERR(api, "alloc_info is NULL");
        emu_leave();
        return NRT_INVALID;
    }
    emu_view_t v = { 0 };
    status = emu_view_take(api, "tensor", tensor, &v);
    if (status == NRT_SUCCESS && view_placement(&v) != NRT_TENSOR_PLACEMENT_DEVICE) {
        EMU_ERR(api, "the tensor is not in device memory");
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS) {
        /* The emulated device address space is the reservation; the allocation extends to
         * the end of the rounded mapping. */
        alloc_info->physical_address = (uint64_t)(uintptr_t)(v.st->va + v.offset);
        alloc_info->size = v.st->mapped - v.offset;
        alloc_info->hbm_index =
            emu_platform_hbm_index(&emu_rt.platform, emu_rt.first_vnc + (uint32_t)v.st->vnc);
    }
    emu_view_put(&v);
    emu_leave();
    return status;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_vnc_memory_stats(uint32_t vnc,
                                                          nrt_vnc_memory_stats_t *stats,
                                                          size_t stats_size_in,
                                                          size_t *stats_size_out)
{
    static const char *const api = "nrt_get_vnc_memory_stats";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    if (stats == NULL || stats_size_out == NULL || stats_size_in == 0) {
        EMU_ERR(api, "stats or stats_size_out is NULL, or stats_size_in is 0");
        emu_leave();
        return NRT_INVALID;
    }
    if (vnc >= emu_rt.vnc_count) {
        EMU_ERR(api, "NeuronCore %u is not visible to this process (visible: 0-%u)", vnc,
                emu_rt.vnc_count - 1);
        emu_leave();
        return NRT_INVALID;
    }
    nrt_vnc_memory_stats_t full = {
        .bytes_used = (size_t)atomic_load(&emu_rt.vnc[vnc].used),
        .bytes_limit = (size_t)emu_rt.vnc[vnc].limit,
    };
    emu_leave();
    size_t n = stats_size_in < sizeof(full) ? stats_size_in : sizeof(full);
    memcpy(stats, &full, n);
    *stats_size_out = n;
    return NRT_SUCCESS;
}
