/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interfaces between the files of the libnrt emulator. Nothing here is exported: the
 * library is built with -fvisibility=hidden and only functions marked NRT_EMU_EXPORT are
 * visible.
 *
 * Locking, outermost first:
 *   emu_rt.lock (rwlock)   runtime phase (uninitialised / ready / closed), platform, visible
 *                          cores and their limits. nrt_init and nrt_close hold it for writing;
 *                          every other call that needs the runtime holds it for reading for
 *                          its whole duration, so nrt_close waits for calls in flight.
 *   tensor registry mutex  the set of live tensor handles and the fields of each tensor.
 *   fault mutex, DMA per-chip mutexes   leaf locks. */
#ifndef HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_INTERNAL_H
#define HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal_backends/trainium/nrt/nrt_abi.h"

#define NRT_EMU_EXPORT __attribute__((visibility("default")))

/* Functions that runtimes older than the emulated one may lack, and that the Trainium backend
 * therefore loads as optional. The legacy build (EMU_LEGACY_RUNTIME: //hal_backends/trainium/
 * emulator:legacy/libnrt.so.1, a test double of such a runtime) does not export them. */
#ifdef EMU_LEGACY_RUNTIME
#define NRT_EMU_EXPORT_RECENT __attribute__((visibility("hidden")))
#else
#define NRT_EMU_EXPORT_RECENT NRT_EMU_EXPORT
#endif

/* The libnrt release whose documented behaviour the emulator follows. */
#define EMU_NRT_MAJOR       2
#define EMU_NRT_MINOR       30
#define EMU_NRT_PATCH       50
#define EMU_NRT_MAINTENANCE 0
#define EMU_NRT_VERSION_STR NRT_ABI_LIBNRT_VERSION
#define EMU_SDK_VERSION_STR NRT_ABI_SDK_VERSION

#define EMU_PAGE_SIZE          ((size_t)4096)    /* device allocation granularity */
#define EMU_HOST_PLACEMENT_MAX ((size_t)4 << 20) /* NRT_TENSOR_PLACEMENT_HOST limit (4 MB) */
#define EMU_MAX_VNC            128               /* largest total_vnc of any instance */
#define EMU_MAX_PHYS_CORES     128               /* largest physical core count */
#define EMU_MAX_CHIPS          16                /* largest chip count */

/* ---- emu_log.c: diagnostics and environment parsing ---- */

enum { EMU_LOG_ERROR, EMU_LOG_WARN, EMU_LOG_INFO, EMU_LOG_DEBUG, EMU_LOG_TRACE };

/* Re-reads NEURON_RT_LOG_LEVEL and NEURON_RT_LOG_LOCATION. */
void emu_log_configure(void);

/* One line on stderr (or syslog): "nrt-emu[pid] LEVEL api: message". */
void emu_log(int level, const char *api, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define EMU_ERR(api, ...)  emu_log(EMU_LOG_ERROR, (api), __VA_ARGS__)
#define EMU_WARN(api, ...) emu_log(EMU_LOG_WARN, (api), __VA_ARGS__)
#define EMU_INFO(api, ...) emu_log(EMU_LOG_INFO, (api), __VA_ARGS__)

/* getenv that treats an empty value as unset. */
const char *emu_getenv(const char *name);

/* Strict unsigned decimal: digits only, no sign or spaces, no overflow. On success *end (if
 * not NULL) points after the last digit and the whole string need not be consumed. */
bool emu_parse_u64_prefix(const char *s, const char **end, uint64_t *out);

/* Whole string is an unsigned decimal. */
bool emu_parse_u64(const char *s, uint64_t *out);

/* "<n>" or "<n><K|M|G|T>[i][B]" (binary multiples, case-insensitive), no overflow, > 0. */
bool emu_parse_bytes(const char *s, uint64_t *out);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t emu_now_ns(void);

/* ---- emu_instance.c: instance types ---- */

typedef struct emu_instance {
    const char *name;            /* EC2 instance type, e.g. "trn1.32xlarge" */
    uint32_t family;             /* NRT_INSTANCE_* */
    uint32_t size;               /* NRT_INSTANCE_SIZE_* */
    const char *arch_name;       /* nrt_instance_info_t.arch_name */
    uint32_t chips;              /* Neuron devices */
    uint32_t cores_per_chip;     /* physical NeuronCores per device */
    uint32_t hbm_per_chip;       /* HBM stacks per device, for hbm_index */
    uint64_t hbm_bytes_per_chip; /* device memory per device */
    uint32_t default_lnc;        /* physical cores per logical core by default */
    bool lnc_configurable;       /* NEURON_LOGICAL_NC_CONFIG applies (Trn2) */
    double dma_gbps_per_chip;    /* documented DMA bandwidth, GB/s (1e9 bytes/s) */
} emu_instance_t;

typedef struct emu_platform {
    const emu_instance_t *inst;
    uint32_t lnc;          /* physical cores per logical core */
    uint32_t vnc_per_chip; /* logical cores per device */
    uint32_t total_vnc;    /* logical cores on the instance */
    uint64_t hbm_per_vnc;  /* device memory per logical core (after NEURON_EMU_HBM_BYTES) */
} emu_platform_t;

/* Resolves NEURON_EMU_INSTANCE, NEURON_LOGICAL_NC_CONFIG / NEURON_RT_VIRTUAL_CORE_SIZE and
 * NEURON_EMU_HBM_BYTES. Returns NRT_SUCCESS or NRT_INVALID (reported as from api). */
NRT_STATUS emu_platform_from_env(const char *api, emu_platform_t *out);

/* HBM stack (within its device) that serves absolute logical core abs_vnc. */
int emu_platform_hbm_index(const emu_platform_t *p, uint32_t abs_vnc);

/* ---- emu_cores.c: visible cores and their exclusive ownership ---- */

typedef enum { EMU_CORES_ALL, EMU_CORES_RANGE, EMU_CORES_COUNT } emu_core_kind_t;

typedef struct emu_core_request {
    emu_core_kind_t kind;
    uint32_t first; /* EMU_CORES_RANGE: first absolute logical core */
    uint32_t count; /* cores requested (all kinds) */
} emu_core_request_t;

typedef struct emu_core_locks {
    int fd[EMU_MAX_PHYS_CORES];
    uint32_t n;
} emu_core_locks_t;

/* Reads NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES. Returns NRT_INVALID for a malformed
 * value and NRT_FAILURE for cores the instance does not have. */
NRT_STATUS emu_cores_parse(const char *api, const emu_platform_t *p, emu_core_request_t *req);

/* Takes the requested cores exclusively (one flock per physical core). On success *first is
 * the absolute logical core that becomes visible core 0. NRT_FAILURE if a core is owned by a
 * live process or the lock directory is unusable. */
NRT_STATUS emu_cores_acquire(const char *api, const emu_platform_t *p,
                             const emu_core_request_t *req, uint32_t *first,
                             emu_core_locks_t *locks);

/* Gives the cores back (closing the lock files drops the locks). */
void emu_cores_release(emu_core_locks_t *locks);

/* ---- emu_state.c: runtime phase ---- */

typedef enum { EMU_PHASE_UNINIT, EMU_PHASE_READY, EMU_PHASE_CLOSED } emu_phase_t;

typedef struct emu_vnc {
    _Atomic uint64_t used; /* bytes charged, 4 KiB multiples */
    uint64_t limit;        /* bytes */
} emu_vnc_t;

typedef struct emu_runtime {
    pthread_rwlock_t lock;
    emu_phase_t phase;
    uint64_t version[4]; /* the libnrt version emulated since nrt_init (emu_version_from_env) */
    emu_platform_t platform;
    uint32_t first_vnc; /* absolute logical core of visible core 0 */
    uint32_t vnc_count; /* visible logical cores */
    emu_core_locks_t locks;
    emu_vnc_t vnc[EMU_MAX_VNC]; /* indexed by visible core */
} emu_runtime_t;

extern emu_runtime_t emu_rt;

/* NRT_SUCCESS when ready, else NRT_UNINITIALIZED / NRT_CLOSED (logged as api). Caller holds
 * emu_rt.lock. */
NRT_STATUS emu_phase_check(const char *api);

/* The libnrt version the emulator reports: NEURON_EMU_RUNTIME_VERSION (major.minor, optionally
 * .patch and .maintenance, major 2) or EMU_NRT_MAJOR.EMU_NRT_MINOR.EMU_NRT_PATCH.0. Returns false
 * for a malformed value (logged as api); v then holds the default. */
bool emu_version_from_env(const char *api, uint64_t v[4]);

/* Whether the version emulated since nrt_init is at least major.minor. Caller holds emu_rt.lock. */
bool emu_version_at_least(uint64_t major, uint64_t minor);

/* Takes emu_rt.lock for reading and checks the phase; on failure the lock is not held. */
NRT_STATUS emu_enter(const char *api);
void emu_leave(void);

/* ---- emu_tensor.c: tensors and device memory ---- */

/* A snapshot of a tensor: its storage (referenced) and the range of it the tensor views. */
typedef struct emu_storage emu_storage_t;
typedef struct emu_view {
    emu_storage_t *st; /* NULL for a tensor without storage */
    size_t offset;
    size_t size;
} emu_view_t;

/* Takes a view of a live tensor (NRT_INVALID for NULL, NRT_INVALID_HANDLE for a dead one, logged
 * as api with `what` naming the argument); release it with emu_view_put. */
NRT_STATUS emu_view_take(const char *api, const char *what, const nrt_tensor_t *t, emu_view_t *v);
void emu_view_put(emu_view_t *v);
/* [offset, offset + size) must lie inside the view, which must have storage. */
NRT_STATUS emu_view_check_range(const char *api, const char *what, const emu_view_t *v,
                                uint64_t offset, uint64_t size);
/* Host address of byte `offset` of the view (its storage is host memory underneath). */
unsigned char *emu_view_bytes(const emu_view_t *v, uint64_t offset);
/* The placement of the view's storage (VIRTUAL for a tensor without storage) and its visible
 * core (-1 for host memory not tied to one). */
nrt_tensor_placement_t emu_view_placement(const emu_view_t *v);
int emu_view_vnc(const emu_view_t *v);
/* Whether two views have bytes of one storage in common. */
bool emu_views_overlap(const emu_view_t *a, const emu_view_t *b);

/* ---- emu_cc_*.c: out-of-NEFF collectives and the async API's completion ---- */

/* nrt_close: cancels what the collectives are doing (every scheduled request completes with
 * NRT_CLOSED), joins their threads and forgets the global communicator. Caller holds
 * emu_rt.lock for writing. */
void emu_cc_shutdown(void);
/* Fork handlers: the child forgets everything (its parent's threads and connections are not its
 * own). */
void emu_cc_lock_for_fork(void);
void emu_cc_unlock_after_fork(void);
void emu_cc_reset_after_fork(void);

/* ---- emu_model.c: tensor sets and models ---- */

/* Frees every model and tensor set (nrt_close, a forked child; emu_rt.lock held for writing). */
void emu_models_release_all(void);

/* Frees every tensor (nrt_close; caller holds emu_rt.lock for writing). */
void emu_tensors_release_all(void);

/* Fork handlers for the registry lock. */
void emu_tensors_lock_for_fork(void);
void emu_tensors_unlock_after_fork(void);

/* ---- emu_executor.c: the StableHLO executor process (stablehlo_executor.py) ---- */

/* Message kinds of the executor's protocol (emu_executor.c, stablehlo_executor.py). */
enum {
    EMU_EXEC_LOAD = 1,
    EMU_EXEC_EXECUTE = 2,
    EMU_EXEC_UNLOAD = 3,
    EMU_EXEC_OK = 16,
    EMU_EXEC_ERROR = 17,
    EMU_EXEC_BAD_INPUT = 18,
    EMU_EXEC_READY = 19,
};

typedef struct emu_exec_reply {
    uint32_t kind; /* EMU_EXEC_OK, EMU_EXEC_ERROR or EMU_EXEC_BAD_INPUT */
    uint64_t id;
    char *text; /* the payload, NUL-terminated (malloc'd: the caller frees it) */
    size_t len;
} emu_exec_reply_t;

/* The executor's lock: every call below but emu_executor_stop needs it held. */
void emu_executor_lock(void);
void emu_executor_unlock(void);

/* Starts the executor unless it runs (a new one if it ended). *generation identifies it: a
 * model compiled by another generation must be loaded again. NRT_FAILURE (logged as api) when
 * it cannot run. */
NRT_STATUS emu_executor_start(const char *api, uint64_t *generation);

/* Whether an executor runs (started, not known to have ended), and its generation. */
bool emu_executor_running(uint64_t *generation);

/* Sends a request and waits for the reply. NRT_FAILURE (logged) when the executor ended or the
 * channel failed; the reply's kind says how the request itself went. */
NRT_STATUS emu_executor_request(const char *api, uint32_t kind, uint64_t id, const void *payload,
                                size_t len, emu_exec_reply_t *reply);

/* The tensor region shared with the executor, grown to at least size bytes (NULL, logged, if it
 * cannot grow). Its size goes with every request. */
unsigned char *emu_executor_region(const char *api, size_t size);

/* nrt_close: stops the executor (takes the lock). */
void emu_executor_stop(void);

/* Fork handlers: the child drops its copies of the channel and region (the executor is the
 * parent's) and starts its own executor on next use. */
void emu_executor_lock_for_fork(void);
void emu_executor_unlock_after_fork(void);
void emu_executor_reset_after_fork(void);

/* ---- emu_stablehlo.c: StableHLO modules as models ---- */

typedef struct emu_shlo emu_shlo_t;

/* Whether an nrt_load image is a StableHLO module: MLIR bytecode ("ML\xefR"), or MLIR text that,
 * after whitespace and `//` comment or `#loc` lines, starts with `module`, or that contains
 * `func.func`. */
bool emu_stablehlo_detect(const void *bytes, size_t size);

/* Compiles a module in the executor. On success *out is the compiled module and *tensors /
 * *ntensors its inputs ("input0", ...) then outputs ("output0", ...), with shapes in *dims (the
 * tensors' shape pointers point there); the caller frees tensors and dims. NRT_INVALID for a
 * module that does not parse or compile or whose types are not supported, NRT_FAILURE when the
 * executor cannot run, NRT_RESOURCE out of memory. */
NRT_STATUS emu_stablehlo_load(const char *api, const void *bytes, size_t size, emu_shlo_t **out,
                              nrt_tensor_info_t **tensors, uint32_t **dims, uint32_t *ntensors);

/* Runs a module on views of its tensors (in the order of emu_stablehlo_load's tensors, bound and
 * size-checked by the caller): inputs are copied in, outputs out. NRT_EXEC_BAD_INPUT or
 * NRT_FAILURE, logged with the executor's message, when the execution fails. */
NRT_STATUS emu_stablehlo_execute(const char *api, emu_shlo_t *s, const nrt_tensor_info_t *tensors,
                                 const emu_view_t *views, uint32_t ntensors);

/* Frees a module; with tell, the executor that compiled it drops it too (nrt_unload). nrt_close
 * and a forked child free without telling (the executor stops, or is the parent's). */
void emu_stablehlo_free(emu_shlo_t *s, bool tell);

/* ---- emu_dma.c: transfer timing ---- */

/* Reads NEURON_EMU_DMA_GBPS. NRT_INVALID if malformed. The value takes effect with
 * emu_dma_commit. */
NRT_STATUS emu_dma_parse(const char *api, const emu_platform_t *p, double *bytes_per_ns);
void emu_dma_commit(double bytes_per_ns);

/* A transfer of bytes through the DMA engines of device chip starts: returns the time at
 * which it completes under the configured bandwidth (0 if unlimited). */
uint64_t emu_dma_begin(uint32_t chip, uint64_t bytes);

/* Blocks until the deadline returned by emu_dma_begin. */
void emu_dma_end(uint64_t deadline_ns);

/* Child side of fork: forget reservations made by the parent's threads. */
void emu_dma_reset_after_fork(void);

/* ---- emu_faults.c: fault injection ---- */

typedef enum {
    EMU_FAULT_ALLOC,
    EMU_FAULT_READ,
    EMU_FAULT_WRITE,
    EMU_FAULT_COPY,
    EMU_FAULT_MEMSET,
    EMU_FAULT_HW, /* any data transfer; latches */
    EMU_FAULT_KINDS
} emu_fault_kind_t;

typedef struct emu_fault_rule {
    bool armed;
    uint64_t after; /* calls that succeed before the first failure */
    uint64_t count; /* failures to inject; 0 = every call after that */
} emu_fault_rule_t;

typedef struct emu_fault_plan {
    emu_fault_rule_t rule[EMU_FAULT_KINDS];
} emu_fault_plan_t;

/* Parses a spec ("" = no faults). NRT_INVALID with a message naming origin if malformed. */
NRT_STATUS emu_faults_parse(const char *origin, const char *spec, emu_fault_plan_t *plan);

/* Installs plan (or keeps the current one when plan is NULL), restarts the counters and
 * clears a latched hardware error. */
void emu_faults_commit(const emu_fault_plan_t *plan);

/* Clears a latched hardware error (nrt_close). */
void emu_faults_clear_latch(void);

/* Called once per operation that passed validation: NRT_SUCCESS, or the status to fail it
 * with (NRT_RESOURCE for allocations, NRT_FAILURE for transfers, NRT_HW_ERROR once the
 * hardware-error rule fired). */
NRT_STATUS emu_fault_hit(emu_fault_kind_t kind);

void emu_faults_lock_for_fork(void);
void emu_faults_unlock_after_fork(void);

#endif /* HAL_BACKENDS_TRAINIUM_EMULATOR_EMU_INTERNAL_H */
