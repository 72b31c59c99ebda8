/* SPDX-License-Identifier: Apache-2.0 */
/* cpu backend: the per-device memory arena.
 *
 * Device and shared memory of a virtual device live in one memfd mapped MAP_SHARED, so that
 * another process can map the same pages (cpu_ipc.c) and collectives among processes can work
 * in place. The file is sparse: ftruncate only sets its size, and a page is materialised when it
 * is first touched, so a 16 GiB device costs address space, not memory.
 *
 * Allocator: blocks tile the arena in address order (a doubly linked list of every block, free
 * or used); free blocks are also on an unordered free list. An allocation takes the best fit
 * (smallest free block that holds the size at the requested alignment, lowest address on a tie),
 * splitting off the alignment padding in front and the remainder behind as free blocks; a free
 * merges the block with free neighbours at once, so two adjacent free blocks never exist. Sizes
 * are rounded to CPU_MIN_ALIGNMENT, so every block starts on a 256-byte boundary. One mutex
 * guards everything: the backend's allocations are few and large (the HAL's caching allocator
 * sits above), so a simple lock costs nothing measurable.
 *
 * Freed pages go back to the system: when a free leaves a free range with at least
 * CPU_ARENA_PUNCH_MIN whole pages, or frees the last allocation of the device, those pages are
 * punched out of the file. Pages above the high-water mark (the end of the highest block ever
 * handed out) were never touched, so ranges are clipped to it and the tail of the arena costs
 * nothing to punch. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal_backends/cpu/cpu_internal.h"

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

static uint64_t round_down(uint64_t v, uint64_t a)
{
    return v & ~(a - 1);
}

/* ---- creation ------------------------------------------------------------------------------ */

/* The arena spans twice the capacity. The capacity itself is enforced by the device's byte
 * accounting, exactly as without an arena; the extra address space (free: the file is sparse)
 * absorbs rounding and fragmentation, so that an allocation the accounting admits practically
 * always finds a free range. */
static bool arena_size_for(uint64_t capacity, uint64_t page, uint64_t *out)
{
    if (capacity > (uint64_t)INT64_MAX / 2 - page)
        return false;
    *out = round_up(capacity * 2, page);
    return true;
}

cpu_arena_t *cpu_arena_create(uint64_t capacity, uint32_t index)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t size = 0;
    if (page <= 0 || !arena_size_for(capacity, (uint64_t)page, &size) || size > SIZE_MAX)
        return NULL;
    cpu_arena_t *arena = calloc(1, sizeof(*arena));
    cpu_block_t *all = calloc(1, sizeof(*all));
    if (arena == NULL || all == NULL)
        goto out_free;
    char name[32];
    snprintf(name, sizeof(name), "hal-cpu-device%u", index);
    /* CLOEXEC: an exec'd program must not inherit (and pin) the device memory. */
    arena->fd = memfd_create(name, MFD_CLOEXEC);
    if (arena->fd < 0)
        goto out_free;
    if (ftruncate(arena->fd, (off_t)size) != 0)
        goto out_close;
    struct stat st;
    if (fstat(arena->fd, &st) != 0)
        goto out_close;
    /* MAP_NORESERVE: the mapping is sparse; pages are committed as they are touched. */
    void *base =
        mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, arena->fd, 0);
    if (base == MAP_FAILED)
        goto out_close;
    /* A core dump would fault in every page of the sparse file (tens of GiB of zeros); device
     * memory is not part of a process image on real accelerators either. */
    (void)madvise(base, (size_t)size, MADV_DONTDUMP);
    if (pthread_mutex_init(&arena->lock, NULL) != 0)
        goto out_unmap;

    arena->base = base;
    arena->size = size;
    arena->page = (uint64_t)page;
    arena->ino = (uint64_t)st.st_ino;
    arena->dev = (uint64_t)st.st_dev;
    all->offset = 0;
    all->size = size;
    all->is_free = true;
    arena->blocks = all;
    arena->free_list = all;
    arena->free_count = 1;
    return arena;

out_unmap:
    munmap(base, (size_t)size);
out_close:
    close(arena->fd);
out_free:
    free(all);
    free(arena);
    return NULL;
}

static void free_nodes(cpu_block_t *b)
{
    while (b != NULL) {
        cpu_block_t *next = b->next;
        free(b);
        b = next;
    }
}

/* Unmaps and closes the arena. Every block must have been freed; another process that still
 * maps the file keeps its pages alive until it unmaps them. */
void cpu_arena_destroy(cpu_arena_t *arena)
{
    if (arena == NULL)
        return;
    munmap(arena->base, (size_t)arena->size);
    close(arena->fd);
    pthread_mutex_destroy(&arena->lock);
    free_nodes(arena->blocks);
    free_nodes(arena->spare);
    free(arena);
}

/* ---- lists (caller holds the lock) --------------------------------------------------------- */

static void free_list_push(cpu_arena_t *a, cpu_block_t *b)
{
    b->free_prev = NULL;
    b->free_next = a->free_list;
    if (a->free_list != NULL)
        a->free_list->free_prev = b;
    a->free_list = b;
    a->free_count++;
}

static void free_list_remove(cpu_arena_t *a, cpu_block_t *b)
{
    if (b->free_prev != NULL)
        b->free_prev->free_next = b->free_next;
    else
        a->free_list = b->free_next;
    if (b->free_next != NULL)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
    a->free_count--;
}

/* Inserts `n` right after `b` in address order. */
static void insert_after(cpu_block_t *b, cpu_block_t *n)
{
    n->prev = b;
    n->next = b->next;
    if (b->next != NULL)
        b->next->prev = n;
    b->next = n;
}

/* Unlinks `b` from the address list and keeps its node for reuse. */
static void retire(cpu_arena_t *a, cpu_block_t *b)
{
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        a->blocks = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    b->next = a->spare;
    b->prev = NULL;
    a->spare = b;
}

/* Makes sure `n` spare nodes exist, so that a split cannot fail halfway. */
static bool reserve_nodes(cpu_arena_t *a, int n)
{
    int have = 0;
    for (cpu_block_t *b = a->spare; b != NULL && have < n; b = b->next)
        have++;
    for (; have < n; have++) {
        cpu_block_t *b = calloc(1, sizeof(*b));
        if (b == NULL)
            return false;
        b->next = a->spare;
        a->spare = b;
    }
    return true;
}

static cpu_block_t *take_node(cpu_arena_t *a)
{
    cpu_block_t *b = a->spare;
    a->spare = b->next;
    *b = (cpu_block_t){ 0 };
    return b;
}

/* ---- allocation ---------------------------------------------------------------------------- */

/* Offset of the first address at or after `offset` that is aligned to `alignment` in the
 * process's address space (the mapping itself is only page-aligned). */
static uint64_t aligned_offset(const cpu_arena_t *a, uint64_t offset, uint64_t alignment)
{
    uint64_t addr = (uint64_t)(uintptr_t)a->base + offset;
    return round_up(addr, alignment) - (uint64_t)(uintptr_t)a->base;
}

/* Allocates `size` bytes aligned to max(alignment, CPU_MIN_ALIGNMENT). Returns HAL_OK,
 * HAL_ERROR_OUT_OF_DEVICE_MEMORY (no free range fits) or HAL_ERROR_OUT_OF_HOST_MEMORY (no
 * memory for the bookkeeping). Sets no error message: the caller words it.
 * Thread safety: safe. */
hal_status_t cpu_arena_alloc(cpu_arena_t *a, size_t size, size_t alignment, cpu_block_t **out)
{
    if (alignment < CPU_MIN_ALIGNMENT)
        alignment = CPU_MIN_ALIGNMENT;
    if ((uint64_t)size > a->size || (uint64_t)alignment > a->size)
        return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    uint64_t need = round_up((uint64_t)size, CPU_MIN_ALIGNMENT);

    pthread_mutex_lock(&a->lock);
    cpu_block_t *best = NULL;
    uint64_t best_start = 0;
    for (cpu_block_t *b = a->free_list; b != NULL; b = b->free_next) {
        uint64_t start = aligned_offset(a, b->offset, alignment);
        if (start < b->offset || start - b->offset > b->size ||
            b->size - (start - b->offset) < need)
            continue;
        if (best == NULL || b->size < best->size ||
            (b->size == best->size && b->offset < best->offset)) {
            best = b;
            best_start = start;
            if (b->size == need && start == b->offset)
                break; /* exact fit: nothing can be better */
        }
    }
    if (best == NULL) {
        pthread_mutex_unlock(&a->lock);
        return HAL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    uint64_t lead = best_start - best->offset;
    uint64_t tail = best->size - lead - need;
    if (!reserve_nodes(a, (lead > 0) + (tail > 0))) {
        pthread_mutex_unlock(&a->lock);
        return HAL_ERROR_OUT_OF_HOST_MEMORY;
    }
    cpu_block_t *b = best;
    if (lead > 0) {
        /* The padding stays free (and on the free list) as its own block. */
        cpu_block_t *n = take_node(a);
        n->offset = best_start;
        n->size = best->size - lead;
        best->size = lead;
        insert_after(best, n);
        b = n;
    } else {
        free_list_remove(a, b);
    }
    if (tail > 0) {
        cpu_block_t *n = take_node(a);
        n->offset = b->offset + need;
        n->size = tail;
        n->is_free = true;
        b->size = need;
        insert_after(b, n);
        free_list_push(a, n);
    }
    b->is_free = false;
    b->requested = size;
    if (b->offset + b->size > a->high_water)
        a->high_water = b->offset + b->size;
    pthread_mutex_unlock(&a->lock);
    *out = b;
    return HAL_OK;
}

/* Gives the whole pages of the free range [start, end) back to the system. Runs under the lock
 * because a page punched after the range was handed out again would lose the new owner's data.
 * Failure (a kernel without hole punching for memfd) only means the pages stay resident. */
static void punch_free_range(cpu_arena_t *a, uint64_t start, uint64_t end)
{
    uint64_t hw = round_up(a->high_water, a->page);
    bool to_end = end == a->size; /* the range is the arena's free tail */
    uint64_t ps = round_up(start, a->page);
    uint64_t pe = round_down(end < hw ? end : hw, a->page);
    if (to_end)
        pe = hw; /* the page holding the high-water mark is free too */
    if (pe <= ps) {
        /* No whole page was ever touched in the range. */
        if (to_end)
            a->high_water = start;
        return;
    }
    /* A small range keeps its pages for the next allocation (and the high-water mark stays),
     * since a punch costs a system call now and page faults later; but once the whole arena is
     * free nothing of the device's memory stays resident. */
    if (pe - ps < CPU_ARENA_PUNCH_MIN && !(start == 0 && to_end))
        return;
    (void)fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)ps, (off_t)(pe - ps));
    if (to_end)
        a->high_water = start; /* everything above `start` is free and clean again */
}

/* Frees a block from cpu_arena_alloc, merging it with free neighbours.
 * Thread safety: safe. */
void cpu_arena_free(cpu_arena_t *a, cpu_block_t *b)
{
    pthread_mutex_lock(&a->lock);
    b->is_free = true;
    b->requested = 0;
    cpu_block_t *prev = b->prev, *next = b->next;
    if (prev != NULL && prev->is_free) {
        prev->size += b->size;
        retire(a, b);
        b = prev; /* already on the free list */
    } else {
        free_list_push(a, b);
    }
    if (next != NULL && next->is_free) {
        b->size += next->size;
        free_list_remove(a, next);
        retire(a, next);
    }
    punch_free_range(a, b->offset, b->offset + b->size);
    pthread_mutex_unlock(&a->lock);
}

/* Counts the free ranges and the largest one (for messages and tests).
 * Thread safety: safe. */
void cpu_arena_stats(cpu_arena_t *a, uint32_t *free_ranges, uint64_t *largest_free)
{
    pthread_mutex_lock(&a->lock);
    uint64_t largest = 0;
    for (cpu_block_t *b = a->free_list; b != NULL; b = b->free_next) {
        if (b->size > largest)
            largest = b->size;
    }
    *free_ranges = a->free_count;
    *largest_free = largest;
    pthread_mutex_unlock(&a->lock);
}
