/* SPDX-License-Identifier: Apache-2.0 */
/* A small strict JSON parser for the tests (see json_mini.h). Recursive descent; nesting is
 * bounded so a malformed file cannot exhaust the stack. */
#include "hal/layers/tests/json_mini.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    const char *s;
    size_t n, i;
    char *err;
    size_t err_size;
    bool failed;
} parser_t;

static json_t *fail(parser_t *p, const char *why)
{
    if (!p->failed && p->err_size)
        snprintf(p->err, p->err_size, "at offset %zu: %s", p->i, why);
    p->failed = true;
    return NULL;
}

static void skip_ws(parser_t *p)
{
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static bool literal(parser_t *p, const char *word)
{
    size_t k = strlen(word);
    if (p->n - p->i < k || memcmp(p->s + p->i, word, k) != 0)
        return false;
    p->i += k;
    return true;
}

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static char *parse_string_raw(parser_t *p)
{
    if (p->i >= p->n || p->s[p->i] != '"')
        return (char *)fail(p, "expected a string");
    p->i++;
    size_t cap = 16, len = 0;
    char *out = malloc(cap);
    while (out) {
        if (p->i >= p->n) {
            free(out);
            return (char *)fail(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->i++];
        if (len + 8 > cap) {
            char *grown = realloc(out, cap *= 2);
            if (!grown) {
                free(out);
                return NULL;
            }
            out = grown;
        }
        if (c == '"') {
            out[len] = '\0';
            return out;
        }
        if (c < 0x20) {
            free(out);
            return (char *)fail(p, "control character in a string");
        }
        if (c != '\\') {
            out[len++] = (char)c;
            continue;
        }
        if (p->i >= p->n)
            break;
        char e = p->s[p->i++];
        switch (e) {
        case '"':
        case '\\':
        case '/':
            out[len++] = e;
            break;
        case 'b':
            out[len++] = '\b';
            break;
        case 'f':
            out[len++] = '\f';
            break;
        case 'n':
            out[len++] = '\n';
            break;
        case 'r':
            out[len++] = '\r';
            break;
        case 't':
            out[len++] = '\t';
            break;
        case 'u': {
            unsigned v = 0;
            for (int k = 0; k < 4; k++) {
                int h = p->i < p->n ? hex(p->s[p->i++]) : -1;
                if (h < 0) {
                    free(out);
                    return (char *)fail(p, "bad \\u escape");
                }
                v = v * 16 + (unsigned)h;
            }
            /* Tests only need ASCII; anything else is kept as '?'. */
            out[len++] = v < 0x80 ? (char)v : '?';
            break;
        }
        default:
            free(out);
            return (char *)fail(p, "bad escape");
        }
    }
    free(out);
    return (char *)fail(p, "unterminated string");
}

static json_t *parse_value(parser_t *p, int depth);

static json_t *node(json_type_t type)
{
    json_t *v = calloc(1, sizeof(*v));
    if (v)
        v->type = type;
    return v;
}

static json_t *parse_number(parser_t *p)
{
    size_t start = p->i;
    if (p->i < p->n && p->s[p->i] == '-')
        p->i++;
    if (p->i >= p->n)
        return fail(p, "bad number");
    if (p->s[p->i] == '0') {
        p->i++;
    } else if (p->s[p->i] >= '1' && p->s[p->i] <= '9') {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
    } else {
        return fail(p, "bad number");
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        size_t d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == d)
            return fail(p, "bad fraction");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        size_t d = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == d)
            return fail(p, "bad exponent");
    }
    char buf[64];
    size_t k = p->i - start < sizeof(buf) - 1 ? p->i - start : sizeof(buf) - 1;
    memcpy(buf, p->s + start, k);
    buf[k] = '\0';
    json_t *v = node(JSON_NUMBER);
    if (v)
        v->number = strtod(buf, NULL);
    return v;
}

static json_t *parse_container(parser_t *p, int depth, bool object)
{
    json_t *v = node(object ? JSON_OBJECT : JSON_ARRAY);
    if (!v)
        return NULL;
    json_t **tail = &v->first;
    p->i++; /* '[' or '{' */
    skip_ws(p);
    char close = object ? '}' : ']';
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            skip_ws(p);
            key = parse_string_raw(p);
            if (!key)
                goto out_fail;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                fail(p, "expected ':'");
                goto out_fail;
            }
            p->i++;
        }
        json_t *item = parse_value(p, depth + 1);
        if (!item) {
            free(key);
            goto out_fail;
        }
        item->key = key;
        *tail = item;
        tail = &item->next;
        v->count++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return v;
        }
        fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        goto out_fail;
    }
out_fail:
    json_free(v);
    return NULL;
}

static json_t *parse_value(parser_t *p, int depth)
{
    if (depth > MAX_DEPTH)
        return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->i >= p->n)
        return fail(p, "unexpected end");
    char c = p->s[p->i];
    if (c == '{' || c == '[')
        return parse_container(p, depth, c == '{');
    if (c == '"') {
        char *s = parse_string_raw(p);
        if (!s)
            return NULL;
        json_t *v = node(JSON_STRING);
        if (!v) {
            free(s);
            return NULL;
        }
        v->string = s;
        return v;
    }
    if (literal(p, "true") || literal(p, "false")) {
        json_t *v = node(JSON_BOOL);
        if (v)
            v->boolean = p->s[p->i - 1] == 'e' && p->s[p->i - 2] == 'u';
        return v;
    }
    if (literal(p, "null"))
        return node(JSON_NULL);
    return parse_number(p);
}

json_t *json_parse(const char *text, size_t len, char *err, size_t err_size)
{
    parser_t p = { text, len, 0, err, err_size, false };
    json_t *v = parse_value(&p, 0);
    if (!v)
        return NULL;
    skip_ws(&p);
    if (p.i != p.n) {
        fail(&p, "trailing characters");
        json_free(v);
        return NULL;
    }
    return v;
}

json_t *json_parse_file(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "cannot open %s", path);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) {
                free(buf);
                buf = NULL;
            }
            buf = grown;
        }
    }
    fclose(f);
    if (!buf) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    json_t *v = json_parse(buf, len, err, err_size);
    free(buf);
    return v;
}

void json_free(json_t *v)
{
    while (v) {
        json_t *next = v->next;
        json_free(v->first);
        free(v->string);
        free(v->key);
        free(v);
        v = next;
    }
}

const json_t *json_get(const json_t *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (const json_t *m = obj->first; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

const char *json_get_string(const json_t *obj, const char *key)
{
    const json_t *m = json_get(obj, key);
    return m && m->type == JSON_STRING ? m->string : NULL;
}

double json_get_number(const json_t *obj, const char *key, double fallback)
{
    const json_t *m = json_get(obj, key);
    return m && m->type == JSON_NUMBER ? m->number : fallback;
}
