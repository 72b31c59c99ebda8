/* SPDX-License-Identifier: Apache-2.0 */
/* The fault-injection layer (HAL_LAYERS=faults, HAL_FAULTS=<spec>): the parsed spec and what
 * the tests and fuzzers reach. Internal to the HAL. The spec syntax and each fault's effect are
 * documented in hal/layers/README.md. */
#ifndef HAL_LAYERS_FAULTS_H
#define HAL_LAYERS_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/hal_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hal_fault_kind {
    HAL_FAULT_ALLOC,        /* device memory allocation fails: HAL_ERROR_OUT_OF_DEVICE_MEMORY */
    HAL_FAULT_DEVICE_LOST,  /* the device is lost: HAL_ERROR_DEVICE_LOST, sticky */
    HAL_FAULT_STREAM_FAIL,  /* the stream latches HAL_ERROR_BACKEND_SPECIFIC asynchronously */
    HAL_FAULT_COLL_TIMEOUT, /* the collective fails with HAL_ERROR_TIMEOUT on this rank */
    HAL_FAULT_PEER_DEATH,   /* this rank's process dies (SIGKILL) at the collective */
    HAL_FAULT_KINDS
} hal_fault_kind_t;

#define HAL_FAULTS_MAX_RULES 32
#define HAL_FAULTS_MAX_SPEC  4096
#define HAL_FAULTS_UNLIMITED UINT64_MAX

typedef struct hal_fault_rule {
    hal_fault_kind_t kind;
    bool always;        /* p = 1 (or p not given) */
    uint64_t threshold; /* otherwise: fires when a 64-bit draw is below (p * 2^64) */
    uint64_t after;     /* the first `after` eligible calls never fire */
    uint64_t count;     /* fires at most this many times (HAL_FAULTS_UNLIMITED) */
    int64_t device;     /* only on this device index (-1: any) */
    int64_t rank;       /* only on this communicator rank (-1: any); collective kinds only */
    uint32_t offset;    /* where the rule starts in the spec (for messages) */
} hal_fault_rule_t;

typedef struct hal_faults_spec {
    uint64_t seed;
    bool log; /* one line on stderr per injected fault */
    uint32_t nrules;
    hal_fault_rule_t rules[HAL_FAULTS_MAX_RULES];
} hal_faults_spec_t;

/* "device_lost" for HAL_FAULT_DEVICE_LOST. */
const char *hal_fault_kind_name(hal_fault_kind_t kind);

/* Parses a HAL_FAULTS value (NULL or blank: no rules). Pure: no globals, no allocation.
 * Returns HAL_OK, or HAL_ERROR_INVALID_ARGUMENT with msg saying what is wrong and where
 * ("at offset 17 ('device_lots'): unknown fault kind ..."). */
hal_status_t hal_faults_parse(const char *spec, hal_faults_spec_t *out, char *msg, size_t msg_size);

/* Whether the k-th eligible call (k counted from 1) with this key (device index or rank) draws a
 * fault under `rule` (rule_index: its position in the spec), ignoring `count`. Pure. */
bool hal_faults_draw(const hal_faults_spec_t *spec, uint32_t rule_index, uint64_t key, uint64_t k);

/* Faults of a kind injected in this process so far (all instances). */
uint64_t hal_faults_injected(hal_fault_kind_t kind);

#ifdef __cplusplus
}
#endif

#endif /* HAL_LAYERS_FAULTS_H */
