/* SPDX-License-Identifier: Apache-2.0 */
/* libnrt emulator: tensor sets, and models: StableHLO modules, or the emulator's own program
 * container.
 *
 * The Neuron compiler cannot run here, so the emulator never executes a NEFF. nrt_load accepts
 * instead, in place of a NEFF:
 *   - a StableHLO module (MLIR text or bytecode): the module neuronx-cc would be given, compiled
 *     and run on the host CPU by XLA (emu_stablehlo.c); its tensors are "input0", ... and
 *     "output0", ...;
 *   - a small text container of the emulator's own, a test double that lets the code around
 *     nrt_load and nrt_execute (tensor sets, slices, ordering, errors) be tested without Python.
 * Any other image, a real NEFF included, fails with NRT_UNSUPPORTED_NEFF_VERSION and a message
 * saying so. The container (README.md, "Programs"):
 *
 *     NRT-EMU-PROGRAM 1
 *     input a 4096            # a named input of 4096 bytes
 *     input b 4096
 *     output out 4096
 *     op add_f32 out a b      # out = a + b, elementwise float32
 *     op copy out2 a          # out2 = a
 *     op fail 1002            # nrt_execute returns status 1002 (NRT_EXEC_BAD_INPUT)
 *
 * Ops run in the order given; each names tensors of the model. Models and tensor sets are in
 * registries (under emu_rt.lock, read side), so a stale handle is NRT_INVALID_HANDLE rather than
 * a crash; nrt_close and a forked child drop them all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal_backends/trainium/emulator/emu_internal.h"

#define CONTAINER_MAGIC "NRT-EMU-PROGRAM 1\n"
#define MODEL_TENSORS   16
#define MODEL_OPS       16
#define SET_TENSORS     64

typedef enum { OP_COPY, OP_ADD_F32, OP_FAIL } op_kind_t;

typedef struct model_op {
    op_kind_t kind;
    int t[3];          /* tensor indices: dst, src (, src2) */
    NRT_STATUS status; /* OP_FAIL */
} model_op_t;

struct nrt_model {
    struct nrt_model *next; /* registry */
    int vnc;
    uint32_t ntensors, nops;
    nrt_tensor_info_t *tensors; /* ntensors of them (room for MODEL_TENSORS in a container) */
    uint32_t *dims;             /* StableHLO: the shapes that the tensors point into */
    model_op_t ops[MODEL_OPS];  /* the container's */
    emu_shlo_t *shlo;           /* StableHLO: the compiled module; NULL for a container */
};

typedef struct tensor_set {
    struct tensor_set *next; /* registry */
    uint32_t count;
    char names[SET_TENSORS][NRT_TENSOR_NAME_MAX];
    nrt_tensor_t *tensors[SET_TENSORS];
} tensor_set_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nrt_model *models;
static tensor_set_t *sets;

/* Frees a model; with tell, a StableHLO module's executor drops it too. */
static void model_free(struct nrt_model *m, bool tell)
{
    if (m == NULL)
        return;
    emu_stablehlo_free(m->shlo, tell);
    free(m->tensors);
    free(m->dims);
    free(m);
}

static bool model_live(const nrt_model_t *m)
{
    pthread_mutex_lock(&registry_lock);
    const struct nrt_model *x = models;
    while (x && x != m)
        x = x->next;
    pthread_mutex_unlock(&registry_lock);
    return x != NULL;
}

static tensor_set_t *set_live(const void *s)
{
    pthread_mutex_lock(&registry_lock);
    tensor_set_t *x = sets;
    while (x && (const void *)x != s)
        x = x->next;
    pthread_mutex_unlock(&registry_lock);
    return x;
}

void emu_models_release_all(void)
{
    pthread_mutex_lock(&registry_lock);
    while (models) {
        struct nrt_model *m = models;
        models = m->next;
        model_free(m, false);
    }
    while (sets) {
        tensor_set_t *s = sets;
        sets = s->next;
        free(s);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* ---- tensor sets ---- */

NRT_EMU_EXPORT NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t **result)
{
    static const char *const api = "nrt_allocate_tensor_set";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    tensor_set_t *s = NULL;
    if (result == NULL) {
        EMU_ERR(api, "result is NULL");
        status = NRT_INVALID;
    } else if ((s = calloc(1, sizeof(*s))) == NULL) {
        EMU_ERR(api, "out of host memory for a tensor set");
        status = NRT_RESOURCE;
    } else {
        pthread_mutex_lock(&registry_lock);
        s->next = sets;
        sets = s;
        pthread_mutex_unlock(&registry_lock);
        *result = s;
    }
    emu_leave();
    return status;
}

NRT_EMU_EXPORT void nrt_destroy_tensor_set(nrt_tensor_set_t **tensor_set)
{
    static const char *const api = "nrt_destroy_tensor_set";
    if (tensor_set == NULL || *tensor_set == NULL)
        return;
    if (emu_enter(api) == NRT_SUCCESS) {
        pthread_mutex_lock(&registry_lock);
        tensor_set_t **p = &sets;
        while (*p && (void *)*p != *tensor_set)
            p = &(*p)->next;
        tensor_set_t *s = *p;
        if (s)
            *p = s->next;
        pthread_mutex_unlock(&registry_lock);
        if (s)
            free(s);
        else
            EMU_ERR(api, "%p is not a live tensor set (destroyed twice?)", *tensor_set);
        emu_leave();
    }
    *tensor_set = NULL;
}

NRT_EMU_EXPORT NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t *tensor_set,
                                                       const char *tensor_name,
                                                       nrt_tensor_t *tensor)
{
    static const char *const api = "nrt_add_tensor_to_tensor_set";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    tensor_set_t *s = set_live(tensor_set);
    status = NRT_INVALID;
    if (s == NULL) {
        EMU_ERR(api, "%p is not a live tensor set", tensor_set);
        status = NRT_INVALID_HANDLE;
    } else if (tensor_name == NULL || tensor == NULL) {
        EMU_ERR(api, "%s is NULL", tensor_name == NULL ? "tensor_name" : "tensor");
    } else if (strlen(tensor_name) >= NRT_TENSOR_NAME_MAX) {
        EMU_ERR(api, "tensor_name is %zu bytes (at most %d)", strlen(tensor_name),
                NRT_TENSOR_NAME_MAX - 1);
    } else {
        uint32_t i = 0;
        while (i < s->count && strcmp(s->names[i], tensor_name) != 0)
            i++;
        if (i == SET_TENSORS) {
            EMU_ERR(api, "the tensor set is full (%d tensors)", SET_TENSORS);
            status = NRT_RESOURCE;
        } else {
            snprintf(s->names[i], sizeof(s->names[i]), "%s", tensor_name);
            s->tensors[i] = tensor; /* add, or replace the one of that name */
            if (i == s->count)
                s->count++;
            status = NRT_SUCCESS;
        }
    }
    emu_leave();
    return status;
}

/* ---- loading the container ---- */

static int tensor_index(const struct nrt_model *m, const char *name)
{
    for (uint32_t i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Parses one line (NUL-terminated, without its newline) into m. */
static NRT_STATUS parse_line(const char *api, unsigned lineno, char *line, struct nrt_model *m)
{
    char *save = NULL;
    char *word = strtok_r(line, " \t", &save);
    if (word == NULL || word[0] == '#')
        return NRT_SUCCESS;
    if (strcmp(word, "input") == 0 || strcmp(word, "output") == 0) {
        char *name = strtok_r(NULL, " \t", &save), *bytes = strtok_r(NULL, " \t", &save);
        char *end = NULL;
        unsigned long long size = bytes ? strtoull(bytes, &end, 10) : 0;
        if (!name || !bytes || *end != '\0' || size == 0 || strlen(name) >= NRT_TENSOR_NAME_MAX ||
            tensor_index(m, name) >= 0 || m->ntensors == MODEL_TENSORS) {
            EMU_ERR(api, "program line %u: expected '%s <new name> <bytes>' (at most %d tensors)",
                    lineno, word, MODEL_TENSORS);
            return NRT_INVALID;
        }
        nrt_tensor_info_t *t = &m->tensors[m->ntensors++];
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->usage = word[0] == 'i' ? NRT_TENSOR_USAGE_INPUT : NRT_TENSOR_USAGE_OUTPUT;
        t->size = (size_t)size;
        t->dtype = NRT_DTYPE_UINT8;
        return NRT_SUCCESS;
    }
    if (strcmp(word, "op") != 0 || m->nops == MODEL_OPS) {
        EMU_ERR(api, "program line %u: '%s' is not 'input', 'output' or 'op' (at most %d ops)",
                lineno, word, MODEL_OPS);
        return NRT_INVALID;
    }
    model_op_t *op = &m->ops[m->nops];
    char *kind = strtok_r(NULL, " \t", &save);
    int want = 0;
    if (kind && strcmp(kind, "copy") == 0) {
        op->kind = OP_COPY;
        want = 2;
    } else if (kind && strcmp(kind, "add_f32") == 0) {
        op->kind = OP_ADD_F32;
        want = 3;
    } else if (kind && strcmp(kind, "fail") == 0) {
        char *code = strtok_r(NULL, " \t", &save);
        op->kind = OP_FAIL;
        op->status = code ? (NRT_STATUS)atoi(code) : NRT_SUCCESS;
        if (op->status == NRT_SUCCESS) {
            EMU_ERR(api, "program line %u: 'op fail' needs a nonzero status", lineno);
            return NRT_INVALID;
        }
        m->nops++;
        return NRT_SUCCESS;
    } else {
        EMU_ERR(api, "program line %u: unknown op '%s' (copy, add_f32, fail)", lineno,
                kind ? kind : "");
        return NRT_INVALID;
    }
    for (int i = 0; i < want; i++) {
        char *name = strtok_r(NULL, " \t", &save);
        op->t[i] = name ? tensor_index(m, name) : -1;
        if (op->t[i] < 0) {
            EMU_ERR(api, "program line %u: '%s' is not a tensor declared above", lineno,
                    name ? name : "(missing)");
            return NRT_INVALID;
        }
        size_t size = m->tensors[op->t[i]].size;
        if ((i == 0) != (m->tensors[op->t[i]].usage == NRT_TENSOR_USAGE_OUTPUT) ||
            size != m->tensors[op->t[0]].size || (op->kind == OP_ADD_F32 && size % 4 != 0)) {
            EMU_ERR(api,
                    "program line %u: an op writes an output from inputs of the same size "
                    "(a multiple of 4 for add_f32)",
                    lineno);
            return NRT_INVALID;
        }
    }
    m->nops++;
    return NRT_SUCCESS;
}

NRT_EMU_EXPORT NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc,
                                   int32_t vnc_count, nrt_model_t **model)
{
    static const char *const api = "nrt_load";
    (void)vnc_count; /* deprecated */
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    int cores = (int)emu_rt.vnc_count;
    struct nrt_model *m = NULL;
    char *text = NULL;
    bool container = neff_bytes != NULL && size >= strlen(CONTAINER_MAGIC) &&
                     memcmp(neff_bytes, CONTAINER_MAGIC, strlen(CONTAINER_MAGIC)) == 0;
    status = NRT_INVALID;
    if (neff_bytes == NULL || model == NULL) {
        EMU_ERR(api, "%s is NULL", neff_bytes == NULL ? "neff_bytes" : "model");
    } else if (vnc < -1 || vnc >= cores) {
        EMU_ERR(api, "NeuronCore %d is neither -1 nor visible (0-%d)", vnc, cores - 1);
    } else if (!container && !emu_stablehlo_detect(neff_bytes, size)) {
        EMU_ERR(api, "the libnrt emulator does not execute NEFF: it loads a StableHLO module "
                     "(MLIR text or bytecode, the module the Neuron compiler would be given) or "
                     "its own program container (first line \"NRT-EMU-PROGRAM 1\")");
        status = NRT_UNSUPPORTED_NEFF_VERSION;
    } else if ((m = calloc(1, sizeof(*m))) == NULL) {
        EMU_ERR(api, "out of host memory for a model");
        status = NRT_RESOURCE;
    } else if (!container) {
        m->vnc = vnc < 0 ? 0 : vnc;
        status = emu_stablehlo_load(api, neff_bytes, size, &m->shlo, &m->tensors, &m->dims,
                                    &m->ntensors);
    } else if ((m->tensors = calloc(MODEL_TENSORS, sizeof(*m->tensors))) == NULL ||
               (text = malloc(size + 1)) == NULL) {
        EMU_ERR(api, "out of host memory for a model");
        status = NRT_RESOURCE;
    } else {
        memcpy(text, neff_bytes, size);
        text[size] = '\0';
        m->vnc = vnc < 0 ? 0 : vnc;
        status = NRT_SUCCESS;
        unsigned lineno = 1;
        char *save = NULL;
        strtok_r(text, "\n", &save); /* the magic line */
        for (char *line = strtok_r(NULL, "\n", &save); line && status == NRT_SUCCESS;
             line = strtok_r(NULL, "\n", &save))
            status = parse_line(api, ++lineno, line, m);
        if (status == NRT_SUCCESS && m->ntensors == 0) {
            EMU_ERR(api, "the program declares no tensors");
            status = NRT_INVALID;
        }
    }
    free(text);
    if (status == NRT_SUCCESS) {
        pthread_mutex_lock(&registry_lock);
        m->next = models;
        models = m;
        pthread_mutex_unlock(&registry_lock);
        *model = m;
    } else {
        model_free(m, false);
    }
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_unload(nrt_model_t *model)
{
    static const char *const api = "nrt_unload";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    pthread_mutex_lock(&registry_lock);
    struct nrt_model **p = &models;
    while (*p && *p != model)
        p = &(*p)->next;
    struct nrt_model *m = *p;
    if (m)
        *p = m->next;
    pthread_mutex_unlock(&registry_lock);
    if (m) {
        model_free(m, true);
    } else {
        EMU_ERR(api, "%p is not a loaded model (unloaded twice?)", (void *)model);
        status = NRT_INVALID_HANDLE;
    }
    emu_leave();
    return status;
}

NRT_EMU_EXPORT_RECENT NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model,
                                                           nrt_tensor_info_array_t **tensor_info)
{
    static const char *const api = "nrt_get_model_tensor_info";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    nrt_tensor_info_array_t *a = NULL;
    size_t ndims = 0;
    bool live = model_live(model);
    for (uint32_t i = 0; live && i < model->ntensors; i++)
        ndims += model->tensors[i].ndim;
    /* One block: the array, then the shapes it points to (freed with it). */
    size_t head = live ? sizeof(*a) + model->ntensors * sizeof(nrt_tensor_info_t) : 0;
    if (tensor_info == NULL) {
        EMU_ERR(api, "tensor_info is NULL");
        status = NRT_INVALID;
    } else if (!live) {
        EMU_ERR(api, "%p is not a loaded model", (void *)model);
        status = NRT_INVALID_HANDLE;
    } else if ((a = calloc(1, head + (ndims + 1) * sizeof(uint32_t))) == NULL) {
        EMU_ERR(api, "out of host memory for the tensor info");
        status = NRT_RESOURCE;
    } else {
        a->tensor_count = model->ntensors;
        memcpy(a->tensor_array, model->tensors, model->ntensors * sizeof(nrt_tensor_info_t));
        uint32_t *shapes = (uint32_t *)(void *)((unsigned char *)a + head);
        for (uint32_t i = 0; i < model->ntensors; i++) {
            nrt_tensor_info_t *t = &a->tensor_array[i];
            if (t->shape == NULL)
                continue; /* the container declares no shapes */
            memcpy(shapes, t->shape, t->ndim * sizeof(uint32_t));
            t->shape = shapes;
            shapes += t->ndim;
        }
        *tensor_info = a;
    }
    emu_leave();
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info)
{
    free(tensor_info);
    return NRT_SUCCESS;
}

/* ---- executing ---- */

/* The view of model tensor i from its set. */
static NRT_STATUS bind(const char *api, const struct nrt_model *m, uint32_t i,
                       const tensor_set_t *s, emu_view_t *v)
{
    const nrt_tensor_info_t *t = &m->tensors[i];
    const char *which = t->usage == NRT_TENSOR_USAGE_INPUT ? "input" : "output";
    uint32_t k = 0;
    while (k < s->count && strcmp(s->names[k], t->name) != 0)
        k++;
    if (k == s->count) {
        EMU_ERR(api, "the %s set has no tensor named '%s'", which, t->name);
        return NRT_INVALID;
    }
    NRT_STATUS status = emu_view_take(api, t->name, s->tensors[k], v);
    if (status == NRT_SUCCESS && v->size != t->size) {
        EMU_ERR(api, "%s '%s' is %zu bytes; the model's is %zu", which, t->name, v->size, t->size);
        status = NRT_INVALID;
    }
    if (status == NRT_SUCCESS)
        status = emu_view_check_range(api, t->name, v, 0, t->size);
    return status;
}

NRT_EMU_EXPORT NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set,
                                      nrt_tensor_set_t *output_set)
{
    static const char *const api = "nrt_execute";
    NRT_STATUS status = emu_enter(api);
    if (status != NRT_SUCCESS)
        return status;
    const tensor_set_t *in = set_live(input_set), *out = set_live(output_set);
    emu_view_t *views = NULL;
    uint32_t bound = 0;
    if (!model_live(model)) {
        EMU_ERR(api, "%p is not a loaded model", (void *)model);
        status = NRT_INVALID_HANDLE;
    } else if ((views = calloc(model->ntensors, sizeof(*views))) == NULL) {
        EMU_ERR(api, "out of host memory");
        status = NRT_RESOURCE;
    } else if (in == NULL || out == NULL) {
        EMU_ERR(api, "the %s set %p is not a live tensor set", in == NULL ? "input" : "output",
                in == NULL ? input_set : (const void *)output_set);
        status = NRT_INVALID_HANDLE;
    } else {
        for (; bound < model->ntensors && status == NRT_SUCCESS; bound++)
            status = bind(api, model, bound,
                          model->tensors[bound].usage == NRT_TENSOR_USAGE_INPUT ? in : out,
                          &views[bound]);
    }
    if (status == NRT_SUCCESS && model->shlo != NULL)
        status = emu_stablehlo_execute(api, model->shlo, model->tensors, views, model->ntensors);
    for (uint32_t k = 0; status == NRT_SUCCESS && k < model->nops; k++) {
        const model_op_t *op = &model->ops[k];
        size_t n = op->kind == OP_FAIL ? 0 : model->tensors[op->t[0]].size;
        if (op->kind == OP_FAIL) {
            EMU_ERR(api, "op %u of the program fails with status %d, as the program asks", k,
                    (int)op->status);
            status = op->status;
        } else if (op->kind == OP_COPY) {
            memmove(emu_view_bytes(&views[op->t[0]], 0), emu_view_bytes(&views[op->t[1]], 0), n);
        } else {
            unsigned char *d = emu_view_bytes(&views[op->t[0]], 0);
            const unsigned char *a = emu_view_bytes(&views[op->t[1]], 0),
                                *b = emu_view_bytes(&views[op->t[2]], 0);
            for (size_t j = 0; j < n; j += 4) {
                float x, y;
                memcpy(&x, a + j, 4);
                memcpy(&y, b + j, 4);
                x += y;
                memcpy(d + j, &x, 4);
            }
        }
    }
    for (uint32_t k = 0; k < bound; k++)
        emu_view_put(&views[k]);
    free(views);
    emu_leave();
    return status;
}
