/* SPDX-License-Identifier: Apache-2.0 */
/* A small strict JSON parser (RFC 8259) for the tests that read trace files back. */
#ifndef HAL_LAYERS_TESTS_JSON_MINI_H
#define HAL_LAYERS_TESTS_JSON_MINI_H

#include <stdbool.h>
#include <stddef.h>

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type_t;

typedef struct json json_t;
struct json {
    json_type_t type;
    bool boolean;
    double number;
    char *string;  /* JSON_STRING (decoded, NUL-terminated) */
    char *key;     /* set on members of an object */
    json_t *first; /* JSON_ARRAY / JSON_OBJECT: the first element or member */
    json_t *next;  /* the next sibling */
    size_t count;  /* elements or members */
};

/* Parses text (len bytes). Returns NULL and fills err on a syntax error. */
json_t *json_parse(const char *text, size_t len, char *err, size_t err_size);
/* Reads and parses a whole file. */
json_t *json_parse_file(const char *path, char *err, size_t err_size);
void json_free(json_t *v);

/* The member `key` of an object, or NULL. */
const json_t *json_get(const json_t *obj, const char *key);
/* Convenience: the string/number member, or a default. */
const char *json_get_string(const json_t *obj, const char *key);
double json_get_number(const json_t *obj, const char *key, double fallback);

#endif /* HAL_LAYERS_TESTS_JSON_MINI_H */
