/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the layers' environment variables. The first input byte picks the parser,
 * the rest is the value:
 *   even: HAL_LAYERS (hal_layers_parse, hal/layers/layer.c);
 *   odd:  HAL_TRACE_FILE's template expansion ("%p", "%%"; hal/layers/trace_file.c, included
 *         here for its static expand()).
 * Checks, besides memory safety: HAL_LAYERS yields at most one instance of each known layer or
 * INVALID_ARGUMENT naming the variable; an expansion fits its buffer, and a template without '%'
 * expands to itself. */

/* trace_file.c is also part of //hal:core, which this target links for hal_layers_parse: the
 * copy included here renames its external functions, so that only its static expand() is used
 * from it and the two copies do not collide at link time. */
#define hal_trace_now_ns       fuzz_copy_hal_trace_now_ns
#define hal_trace_tid          fuzz_copy_hal_trace_tid
#define hal_trace_pid          fuzz_copy_hal_trace_pid
#define hal_trace_file_acquire fuzz_copy_hal_trace_file_acquire
#define hal_trace_file_release fuzz_copy_hal_trace_file_release
#define hal_trace_file_emit    fuzz_copy_hal_trace_file_emit
#define hal_trace_file_flush   fuzz_copy_hal_trace_file_flush
#define hal_trace_file_dropped fuzz_copy_hal_trace_file_dropped
#define hal_trace_file_path    fuzz_copy_hal_trace_file_path
#include "hal/layers/trace_file.c"

#include "hal/layers/layer.h"

#define CHECK(cond)           \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    size_t len = strlen(text);
    if ((data[0] & 1) == 0) {
        hal_layer_list_t list;
        hal_status_t st = hal_layers_parse(text, &list);
        if (st == HAL_OK) {
            CHECK(len < 256);
            CHECK(list.count <= 3);
            bool validation = false;
            for (uint32_t i = 0; i < list.count; i++) {
                CHECK(list.layers[i] == &hal_validation_layer ||
                      list.layers[i] == &hal_trace_layer || list.layers[i] == &hal_faults_layer);
                validation |= list.layers[i] == &hal_validation_layer;
                for (uint32_t j = 0; j < i; j++)
                    CHECK(list.layers[i] != list.layers[j]);
            }
            CHECK(validation == (strstr(text, "validation") != NULL));
            CHECK(hal_layers_keep_handles(&list) == validation);
        } else {
            CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
            CHECK(strstr(hal_last_error_message(), "HAL_LAYERS") != NULL);
        }
    } else {
        char out[PATH_MAX];
        hal_status_t st = expand(text, out, sizeof(out), "fuzz");
        if (st == HAL_OK) {
            CHECK(strlen(out) < sizeof(out) && out[0] != '\0');
            if (!strchr(text, '%'))
                CHECK(strcmp(out, text) == 0);
            CHECK(strlen(out) <= len + len / 2 * 8); /* "%p" grows by at most 8 digits */
        } else {
            CHECK(st == HAL_ERROR_INVALID_ARGUMENT);
            CHECK(strstr(hal_last_error_message(), "HAL_TRACE_FILE") != NULL);
        }
    }
    free(text);
    return 0;
}
