/* Generic protobuf text-format parser (the syntax of Triton's config.pbtxt) into a tree of fields.
 * It knows no schema: config_model.c maps the tree onto ModelConfig and rejects unknown fields. */
#ifndef SERVE_CONFIG_TEXT_H
#define SERVE_CONFIG_TEXT_H

#include <stddef.h>

#include "serve_error.h"

typedef enum config_kind {
    CONFIG_STRING,  /* "..." or '...' (escapes decoded, adjacent literals joined); text may hold NUL bytes */
    CONFIG_NUMBER,  /* 12, -3, 0x1f, 1.5e3, -inf, nan: text as written (sign included) */
    CONFIG_IDENT,   /* an enum value or true/false: text as written */
    CONFIG_MESSAGE, /* { ... } or < ... >: fields in `fields` */
} config_kind;

typedef struct config_field config_field;

/* A message: its fields in file order. A repeated field appears once per value (`dims: [1, 2]` gives two). */
typedef struct config_msg {
    config_field *fields;
    size_t num_fields;
} config_msg;

struct config_field {
    char *name;
    int line, col; /* 1-based position of the field name, for error messages */
    config_kind kind;
    char *text;    /* scalar text (NUL-terminated; text_len excludes the terminator); NULL for messages */
    size_t text_len;
    config_msg msg; /* for CONFIG_MESSAGE */
};

/* Parses `len` bytes of text format into `out`. Returns 0, or -1 with "line L, column C: <what>" in e (400). */
int config_text_parse(const char *src, size_t len, config_msg *out, serve_error *e);
/* Releases what config_text_parse allocated; NULL or an empty message is a no-op. */
void config_msg_free(config_msg *m);

#endif
