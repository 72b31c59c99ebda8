/* SPDX-License-Identifier: Apache-2.0 */
/* Trainium backend: what the backend reads of a StableHLO module itself, without a compiler:
 * whether an image is one, and which results of `main` must alias a parameter. Shapes and dtypes
 * come from the runtime (nrt_get_model_tensor_info), which knows the compiled module. */
#include <string.h>

#include "hal_backends/trainium/trn_internal.h"

/* MLIR bytecode's magic number. */
static const char bytecode_magic[4] = { 'M', 'L', '\xef', 'R' };

/* Whether the text [p, end) contains needle. */
static const char *find(const char *p, const char *end, const char *needle)
{
    size_t n = strlen(needle);
    for (; p + n <= end; p++)
        if (memcmp(p, needle, n) == 0)
            return p;
    return NULL;
}

bool trn_stablehlo_looks_like_module(const void *image, size_t size)
{
    const char *p = image, *end = p + size;
    if (size >= sizeof(bytecode_magic) && memcmp(p, bytecode_magic, sizeof(bytecode_magic)) == 0)
        return true;
    return find(p, end, "func.func") != NULL || find(p, end, "module") != NULL;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
}

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && is_space(*p))
        p++;
    return p;
}

/* Parses a decimal integer at p (after white space); -1 if none. */
static long parse_int(const char *p, const char *end)
{
    p = skip_space(p, end);
    long v = -1;
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        v = (v < 0 ? 0 : v * 10) + (*p - '0');
    return v;
}

/* Calls piece(ctx, index, begin, end) for each top-level comma-separated piece of the
 * bracketed list that starts at p (its opening character); returns where the list ended. */
static const char *
split_list(const char *p, const char *end,
           void (*piece)(void *ctx, uint32_t index, const char *b, const char *e), void *ctx)
{
    int depth = 0;
    uint32_t index = 0;
    const char *begin = ++p;
    for (; p < end; p++) {
        char ch = *p;
        if (ch == '-' && p + 1 < end && p[1] == '>') {
            p++; /* "->" inside a nested function type */
        } else if (ch == '(' || ch == '<' || ch == '[' || ch == '{') {
            depth++;
        } else if ((ch == ')' || ch == '>' || ch == ']' || ch == '}') && depth > 0) {
            depth--;
        } else if ((ch == ',' || ch == ')') && depth == 0) {
            if (p > begin || ch == ',')
                piece(ctx, index++, begin, p);
            begin = p + 1;
            if (ch == ')')
                return p + 1;
        }
    }
    return end;
}

typedef struct signature_scan {
    uint32_t nparams, nresults;
    int32_t *aliases;
    bool *is_bool; /* nparams + nresults */
    bool results;  /* scanning the results */
} signature_scan_t;

/* Whether the piece's tensor type has element type i1. */
static bool piece_is_i1(const char *b, const char *e)
{
    const char *t = find(b, e, "tensor<");
    if (!t)
        return false;
    const char *close = memchr(t, '>', (size_t)(e - t));
    return close && close - t >= 9 &&
           (memcmp(close - 3, "xi1", 3) == 0 || memcmp(close - 3, "<i1", 3) == 0);
}

static void scan_piece(void *ctx, uint32_t index, const char *b, const char *e)
{
    signature_scan_t *s = ctx;
    if (!s->results) {
        if (index >= s->nparams)
            return;
        s->is_bool[index] = piece_is_i1(b, e);
        const char *attr = find(b, e, "tf.aliasing_output");
        const char *eq = attr ? memchr(attr, '=', (size_t)(e - attr)) : NULL;
        long r = eq ? parse_int(eq + 1, e) : -1;
        if (r >= 0 && (uint64_t)r < s->nresults)
            s->aliases[r] = (int32_t)index;
    } else if (index < s->nresults) {
        s->is_bool[s->nparams + index] = piece_is_i1(b, e);
    }
}

/* The module attribute mhlo.input_output_alias (before `main`, in [p, end)): a list of entries
 * {alias = {kind, parameter_number, ...}, output_index = array<i64[: r]>}; those of kind
 * "must_alias" say which parameter a result (empty output_index: the only one) is written to. */
static void module_aliases(const char *p, const char *end, uint32_t nresults, uint32_t nparams,
                           int32_t *aliases)
{
    const char *list = find(p, end, "mhlo.input_output_alias");
    list = list ? memchr(list, '[', (size_t)(end - list)) : NULL;
    if (!list)
        return;
    int depth = 0;
    const char *entry = NULL;
    for (const char *q = list + 1; q < end; q++) {
        if (*q == '{' && depth++ == 0) {
            entry = q;
        } else if (*q == '}' && depth > 0 && --depth == 0) {
            const char *stop = q + 1;
            const char *param = find(entry, stop, "parameter_number");
            const char *out = find(entry, stop, "output_index");
            const char *eq = param ? memchr(param, '=', (size_t)(stop - param)) : NULL;
            long pn = eq ? parse_int(eq + 1, stop) : -1, r = -1;
            const char *arr = out ? find(out, stop, "array<i64") : NULL;
            if (arr) {
                const char *v = skip_space(arr + strlen("array<i64"), stop);
                r = v < stop && *v == '>' ? 0 : v < stop && *v == ':' ? parse_int(v + 1, stop) : -1;
            }
            if (find(entry, stop, "must_alias") && pn >= 0 && (uint64_t)pn < nparams && r >= 0 &&
                (uint64_t)r < nresults)
                aliases[r] = (int32_t)pn;
        } else if (*q == ']' && depth == 0) {
            return;
        }
    }
}

void trn_stablehlo_signature(const void *image, size_t size, uint32_t nparams, uint32_t nresults,
                             int32_t *aliases, bool *is_bool)
{
    for (uint32_t r = 0; r < nresults; r++)
        aliases[r] = -1;
    for (uint32_t i = 0; i < nparams + nresults; i++)
        is_bool[i] = false;
    const char *p = image, *end = p + size;
    if (size >= sizeof(bytecode_magic) && memcmp(p, bytecode_magic, sizeof(bytecode_magic)) == 0)
        return;
    const char *main = find(p, end, "@main(");
    if (!main)
        return;
    signature_scan_t scan = { nparams, nresults, aliases, is_bool, false };
    const char *after = split_list(main + strlen("@main"), end, scan_piece, &scan);
    module_aliases(p, main, nresults, nparams, aliases);
    p = skip_space(after, end);
    if (end - p < 2 || memcmp(p, "->", 2) != 0)
        return;
    p = skip_space(p + 2, end);
    scan.results = true;
    if (p < end && *p == '(') {
        split_list(p, end, scan_piece, &scan);
    } else if (nresults > 0) {
        const char *e = p;
        int depth = 0;
        for (; e < end && !(depth == 0 && (is_space(*e) || *e == '{')); e++)
            depth += *e == '<' ? 1 : *e == '>' ? -1 : 0;
        scan_piece(&scan, 0, p, e);
    }
}
