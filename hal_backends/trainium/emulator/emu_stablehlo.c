/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: StableHLO modules loaded in place of a NEFF, compiled and executed by a real
 * compiler, XLA's CPU backend, in the executor process (emu_executor.c, stablehlo_executor.py).
 *
 * This is a test double: it executes exactly the module that neuronx-cc would be given, on the
 * host CPU; it never runs a NEFF. A module has one public function `main`; its parameters are
 * the model's inputs "input0", "input1", ... and its results the outputs "output0", ... (the
 * names the Neuron compiler gives a NEFF's tensors). Element types map to nrt_dtype_t: f32, f16,
 * bf16, i8/ui8, i16/ui16, i32/ui32, i64/ui64 to their namesakes, i1 (bool) to UINT8 with one
 * byte per element; f64 is refused (the Neuron compiler takes f32), and so is anything else.
 *
 * The module is compiled once, by nrt_load; the executor keeps the executable under an id. The
 * module's bytes stay here too, so that a model outlives its executor: when the executor ended
 * and a new one runs (another generation), the next execution compiles the module there again.
 * An execution copies the inputs into the region shared with the executor (inputs then
 * outputs, each 64-byte aligned: XLA reads aligned inputs there in place), sends EXECUTE and
 * copies the outputs back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

#define SHLO_MAX_DIMS    32
#define SHLO_MAX_TENSORS 65536

struct emu_shlo {
    void *module; /* the bytes given to nrt_load */
    size_t size;
    char *signature;     /* the executor's answer to LOAD, to check a compile in a new one */
    uint64_t generation; /* the executor that compiled it */
    uint64_t id;         /* its id there */
};

typedef struct shlo_type {
    const char *mlir; /* the element type as MLIR spells it */
    nrt_dtype_t dtype;
    size_t bytes;
} shlo_type_t;

static const shlo_type_t types[] = {
    { "f32", NRT_DTYPE_FLOAT32, 4 },   { "f16", NRT_DTYPE_FLOAT16, 2 },
    { "bf16", NRT_DTYPE_BFLOAT16, 2 }, { "i1", NRT_DTYPE_UINT8, 1 },
    { "i8", NRT_DTYPE_INT8, 1 },       { "ui8", NRT_DTYPE_UINT8, 1 },
    { "i16", NRT_DTYPE_INT16, 2 },     { "ui16", NRT_DTYPE_UINT16, 2 },
    { "i32", NRT_DTYPE_INT32, 4 },     { "ui32", NRT_DTYPE_UINT32, 4 },
    { "i64", NRT_DTYPE_INT64, 8 },     { "ui64", NRT_DTYPE_UINT64, 8 },
};

/* Skips whitespace, and lines that are `//` comments or `#loc` definitions. */
static const char *skip_preamble(const char *p, const char *end)
{
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            p++;
        bool comment = end - p >= 2 && memcmp(p, "//", 2) == 0;
        bool loc = end - p >= 4 && memcmp(p, "#loc", 4) == 0;
        if (!comment && !loc)
            return p;
        while (p < end && *p != '\n')
            p++;
    }
}

/* Recognises a StableHLO module by its first bytes (emu_internal.h). */
bool emu_stablehlo_detect(const void *bytes, size_t size)
{
    const char *p = bytes, *end = p + size;
    if (size >= 4 && memcmp(p, "ML\xefR", 4) == 0)
        return true;
    p = skip_preamble(p, end);
    if (end - p >= 6 && memcmp(p, "module", 6) == 0)
        return true;
    return memmem(bytes, size, "func.func", 9) != NULL;
}

/* Reads one signature line ("in|out <type> <dim>...") into t. false, logged, if unsupported. */
static bool parse_tensor(const char *api, char *line, uint32_t index[2], nrt_tensor_info_t *t,
                         uint32_t *dims)
{
    char *save = NULL;
    char *usage = strtok_r(line, " ", &save), *type = strtok_r(NULL, " ", &save);
    bool in = usage != NULL && strcmp(usage, "in") == 0;
    if (usage == NULL || type == NULL || (!in && strcmp(usage, "out") != 0)) {
        EMU_ERR(api, "the StableHLO executor answered a signature line it should not: '%s'",
                usage != NULL ? usage : "");
        return false;
    }
    const char *what = in ? "parameter" : "result";
    uint32_t k = index[in ? 0 : 1]++;
    const shlo_type_t *ty = NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(types[i].mlir, type) == 0)
            ty = &types[i];
    if (ty == NULL && strcmp(type, "f64") == 0) {
        EMU_ERR(api,
                "%s %u of @main is f64: the module is the one the Neuron compiler would be given, "
                "and neuronx-cc takes f32 (convert to f32 before exporting)",
                what, k);
        return false;
    }
    if (ty == NULL) {
        EMU_ERR(api, "%s %u of @main has element type %s, which Neuron models do not take", what, k,
                type);
        return false;
    }
    snprintf(t->name, sizeof(t->name), "%s%u", in ? "input" : "output", k);
    t->usage = in ? NRT_TENSOR_USAGE_INPUT : NRT_TENSOR_USAGE_OUTPUT;
    t->dtype = ty->dtype;
    t->ndim = 0;
    uint64_t size = ty->bytes;
    for (char *d = strtok_r(NULL, " ", &save); d != NULL; d = strtok_r(NULL, " ", &save)) {
        uint64_t n = 0;
        if (t->ndim == SHLO_MAX_DIMS || !emu_parse_u64(d, &n) || n > UINT32_MAX ||
            (n != 0 && size > UINT64_MAX / n)) {
            EMU_ERR(api, "%s %u of @main: more than %d dimensions, or too large", what, k,
                    SHLO_MAX_DIMS);
            return false;
        }
        dims[t->ndim++] = (uint32_t)n;
        size *= n;
    }
    if (size == 0 || size > SIZE_MAX) {
        EMU_ERR(api, "%s %u of @main has no elements: a Neuron tensor has at least one byte", what,
                k);
        return false;
    }
    t->size = (size_t)size;
    t->shape = dims;
    return true;
}

/* Turns a signature into tensors: inputs first, then outputs. NRT_INVALID if unsupported. */
static NRT_STATUS parse_signature(const char *api, const char *signature,
                                  nrt_tensor_info_t **tensors, uint32_t **dims, uint32_t *count)
{
    uint32_t lines = 0;
    for (const char *p = signature; *p != '\0'; p++)
        lines += *p == '\n';
    if (lines == 0 || lines > SHLO_MAX_TENSORS) {
        EMU_ERR(api, "@main has %u parameters and results (1 to %d)", lines, SHLO_MAX_TENSORS);
        return NRT_INVALID;
    }
    char *text = strdup(signature);
    *tensors = calloc(lines, sizeof(**tensors));
    *dims = calloc((size_t)lines * SHLO_MAX_DIMS, sizeof(**dims));
    if (text == NULL || *tensors == NULL || *dims == NULL) {
        EMU_ERR(api, "out of host memory for a model's tensors");
        free(text);
        return NRT_RESOURCE;
    }
    NRT_STATUS status = NRT_SUCCESS;
    uint32_t index[2] = { 0, 0 }, n = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line != NULL && status == NRT_SUCCESS;
         line = strtok_r(NULL, "\n", &save), n++)
        if (!parse_tensor(api, line, index, &(*tensors)[n], *dims + (size_t)n * SHLO_MAX_DIMS))
            status = NRT_INVALID;
    free(text);
    *count = n;
    return status;
}

/* Compiles s's module in the running executor (generation gen). Caller holds its lock. */
static NRT_STATUS compile(const char *api, emu_shlo_t *s, uint64_t gen)
{
    emu_exec_reply_t reply;
    NRT_STATUS status = emu_executor_request(api, EMU_EXEC_LOAD, 0, s->module, s->size, &reply);
    if (status != NRT_SUCCESS)
        return status;
    if (reply.kind != EMU_EXEC_OK) {
        EMU_ERR(api, "the StableHLO module does not load: %s", reply.text);
        free(reply.text);
        return NRT_INVALID;
    }
    if (s->signature != NULL && strcmp(s->signature, reply.text) != 0) {
        EMU_ERR(api, "the module compiled again by a new StableHLO executor has another signature");
        free(reply.text);
        return NRT_FAILURE;
    }
    if (s->signature == NULL)
        s->signature = reply.text;
    else
        free(reply.text);
    s->generation = gen;
    s->id = reply.id;
    return NRT_SUCCESS;
}

/* nrt_load of a module: compiled in the executor, its signature turned into tensors. */
NRT_STATUS emu_stablehlo_load(const char *api, const void *bytes, size_t size, emu_shlo_t **out,
                              nrt_tensor_info_t **tensors, uint32_t **dims, uint32_t *ntensors)
{
    *tensors = NULL;
    *dims = NULL;
    *ntensors = 0;
    emu_shlo_t *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->module = malloc(size)) == NULL) {
        EMU_ERR(api, "out of host memory for a StableHLO module of %zu bytes", size);
        free(s);
        return NRT_RESOURCE;
    }
    memcpy(s->module, bytes, size);
    s->size = size;
    uint64_t gen = 0;
    emu_executor_lock();
    NRT_STATUS status = emu_executor_start(api, &gen);
    if (status == NRT_SUCCESS)
        status = compile(api, s, gen);
    emu_executor_unlock();
    if (status == NRT_SUCCESS)
        status = parse_signature(api, s->signature, tensors, dims, ntensors);
    if (status != NRT_SUCCESS) {
        free(*tensors);
        free(*dims);
        *tensors = NULL;
        *dims = NULL;
        emu_stablehlo_free(s, true);
        return status;
    }
    *out = s;
    return NRT_SUCCESS;
}

/* Byte offset of each tensor in the region (64-byte aligned, in order); returns the total. */
static size_t layout(const nrt_tensor_info_t *tensors, uint32_t n, uint64_t *slots)
{
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        at = (at + 63) & ~(size_t)63;
        slots[2 * i] = at;
        slots[2 * i + 1] = tensors[i].size;
        at += tensors[i].size;
    }
    return at;
}

/* nrt_execute of a module: inputs to the region, EXECUTE, outputs back. A module compiled
 * by an executor that has ended is compiled again first. */
NRT_STATUS emu_stablehlo_execute(const char *api, emu_shlo_t *s, const nrt_tensor_info_t *tensors,
                                 const emu_view_t *views, uint32_t ntensors)
{
    uint64_t *slots = malloc((size_t)ntensors * 2 * sizeof(*slots));
    if (slots == NULL) {
        EMU_ERR(api, "out of host memory");
        return NRT_RESOURCE;
    }
    size_t total = layout(tensors, ntensors, slots);
    uint64_t gen = 0;
    emu_exec_reply_t reply = { 0 };
    unsigned char *region = NULL;
    emu_executor_lock();
    NRT_STATUS status = emu_executor_start(api, &gen);
    if (status == NRT_SUCCESS && gen != s->generation)
        status = compile(api, s, gen); /* the executor that compiled it has ended */
    if (status == NRT_SUCCESS && (region = emu_executor_region(api, total)) == NULL)
        status = NRT_RESOURCE;
    for (uint32_t i = 0; status == NRT_SUCCESS && i < ntensors; i++)
        if (tensors[i].usage == NRT_TENSOR_USAGE_INPUT)
            memcpy(region + slots[2 * i], emu_view_bytes(&views[i], 0), tensors[i].size);
    if (status == NRT_SUCCESS)
        status = emu_executor_request(api, EMU_EXEC_EXECUTE, s->id, slots,
                                      (size_t)ntensors * 2 * sizeof(*slots), &reply);
    if (status == NRT_SUCCESS && reply.kind != EMU_EXEC_OK) {
        EMU_ERR(api, "the StableHLO executor failed to execute the module: %s", reply.text);
        status = reply.kind == EMU_EXEC_BAD_INPUT ? NRT_EXEC_BAD_INPUT : NRT_FAILURE;
    }
    for (uint32_t i = 0; status == NRT_SUCCESS && i < ntensors; i++)
        if (tensors[i].usage == NRT_TENSOR_USAGE_OUTPUT)
            memcpy(emu_view_bytes(&views[i], 0), region + slots[2 * i], tensors[i].size);
    emu_executor_unlock();
    free(reply.text);
    free(slots);
    return status;
}

/* nrt_unload (tell) or nrt_close / fork (not): frees the module. */
void emu_stablehlo_free(emu_shlo_t *s, bool tell)
{
    if (s == NULL)
        return;
    if (tell && s->generation != 0) {
        uint64_t gen = 0;
        emu_exec_reply_t reply = { 0 };
        emu_executor_lock();
        /* Only the executor that compiled it has it; a new one is not started for this. */
        if (emu_executor_running(&gen) && gen == s->generation &&
            emu_executor_request("nrt_unload", EMU_EXEC_UNLOAD, s->id, NULL, 0, &reply) ==
                NRT_SUCCESS)
            free(reply.text);
        emu_executor_unlock();
    }
    free(s->signature);
    free(s->module);
    free(s);
}
