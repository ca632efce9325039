/* Protobuf text-format parser: a hand-written recursive-descent parser over a small tokenizer.
 * Grammar (what protobuf's TextFormat accepts, without extensions and Any expansion):
 *     message := { field [',' | ';'] }
 *     field   := name ( ':' value | [':'] '{' message '}' | [':'] '<' message '>' )
 *     value   := scalar | '{' message '}' | '<' message '>' | '[' [ elem { ',' elem } ] ']'
 *     scalar  := string { string } | ['-'] number | ['-'] identifier
 * Comments run from '#' to the end of the line. Strings accept C escapes (\n \t \\ \' \" \ooo \xHH). */
#include "config_text.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_DEPTH 64

typedef struct parser {
    const char *s;
    size_t len, pos;
    int line, col;
    serve_error *e;
    int failed;
} parser;

static int fail(parser *p, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(parser *p, int line, int col, const char *fmt, ...) {
    if (p->failed) return -1;
    p->failed = 1;
    char what[sizeof p->e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return serve_fail(p->e, SERVE_BAD_REQUEST, "line %d, column %d: %s", line, col, what);
}

static int peekc(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static void advance(parser *p) {
    if (p->pos >= p->len) return;
    if (p->s[p->pos] == '\n') {
        p->line++;
        p->col = 1;
    } else {
        p->col++;
    }
    p->pos++;
}

/* Skips whitespace and comments. */
static void skip_space(parser *p) {
    for (;;) {
        int c = peekc(p);
        if (c == '#') {
            while (peekc(p) != -1 && peekc(p) != '\n') advance(p);
        } else if (c != -1 && isspace(c)) {
            advance(p);
        } else {
            return;
        }
    }
}

static int is_ident_start(int c) { return c != -1 && (isalpha(c) || c == '_'); }
static int is_ident_char(int c) { return c != -1 && (isalnum(c) || c == '_'); }

/* Reads an identifier at the cursor into a new string (NULL on allocation failure or when none is there). */
static char *read_ident(parser *p) {
    size_t start = p->pos;
    while (is_ident_char(peekc(p))) advance(p);
    size_t n = p->pos - start;
    if (n == 0) return NULL;
    char *r = malloc(n + 1);
    if (!r) return NULL;
    memcpy(r, p->s + start, n);
    r[n] = 0;
    return r;
}

typedef struct buf {
    char *d;
    size_t n, cap;
} buf;

static int buf_put(buf *b, const char *src, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        while (cap < b->n + n + 1) cap *= 2;
        char *d = realloc(b->d, cap);
        if (!d) return -1;
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, src, n);
    b->n += n;
    b->d[b->n] = 0;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one quoted literal at the cursor, appending its decoded bytes to b. */
static int read_string(parser *p, buf *b) {
    int quote = peekc(p), line = p->line, col = p->col;
    advance(p);
    for (;;) {
        int c = peekc(p);
        if (c == -1 || c == '\n') return fail(p, line, col, "unterminated string");
        advance(p);
        if (c == quote) return 0;
        char ch = (char)c;
        if (c == '\\') {
            int e = peekc(p), el = p->line, ec = p->col - 1;
            if (e == -1) return fail(p, line, col, "unterminated string");
            advance(p);
            switch (e) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'a': ch = '\a'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'v': ch = '\v'; break;
            case '\\': case '\'': case '"': case '?': ch = (char)e; break;
            case 'x': {
                int v = 0, k = 0;
                while (k < 2 && hexval(peekc(p)) >= 0) {
                    v = v * 16 + hexval(peekc(p));
                    advance(p);
                    k++;
                }
                if (k == 0) return fail(p, el, ec, "\\x escape without hex digits");
                ch = (char)v;
                break;
            }
            default:
                if (e >= '0' && e <= '7') {
                    int v = e - '0', k = 1;
                    while (k < 3 && peekc(p) >= '0' && peekc(p) <= '7') {
                        v = v * 8 + (peekc(p) - '0');
                        advance(p);
                        k++;
                    }
                    if (v > 255) return fail(p, el, ec, "octal escape \\%o is larger than a byte", (unsigned)v);
                    ch = (char)v;
                } else {
                    return fail(p, el, ec, "unknown escape '\\%c' in string", e);
                }
            }
        }
        if (buf_put(b, &ch, 1) != 0) return fail(p, line, col, "out of memory");
    }
}

static int parse_message(parser *p, config_msg *m, int close, int depth, int line, int col);

static config_field *new_field(parser *p, config_msg *m, const char *name, int line, int col) {
    config_field *f = realloc(m->fields, (m->num_fields + 1) * sizeof *f);
    if (!f) {
        fail(p, line, col, "out of memory");
        return NULL;
    }
    m->fields = f;
    config_field *nf = &f[m->num_fields];
    memset(nf, 0, sizeof *nf);
    nf->name = strdup(name);
    nf->line = line;
    nf->col = col;
    if (!nf->name) {
        fail(p, line, col, "out of memory");
        return NULL;
    }
    m->num_fields++;
    return nf;
}

/* Parses a nested message whose opening '{' or '<' is at the cursor into a new field `name` of m. */
static int parse_sub(parser *p, config_msg *m, const char *name, int line, int col, int depth) {
    if (depth >= CONFIG_MAX_DEPTH) return fail(p, p->line, p->col, "messages nested deeper than %d", CONFIG_MAX_DEPTH);
    int open = peekc(p), ol = p->line, oc = p->col;
    advance(p);
    config_msg sub = {0};
    if (parse_message(p, &sub, open == '{' ? '}' : '>', depth + 1, ol, oc) != 0) {
        config_msg_free(&sub);
        return -1;
    }
    config_field *f = new_field(p, m, name, line, col);
    if (!f) {
        config_msg_free(&sub);
        return -1;
    }
    f->kind = CONFIG_MESSAGE;
    f->msg = sub;
    return 0;
}

/* Parses one scalar at the cursor into a new field `name` of m. */
static int parse_scalar(parser *p, config_msg *m, const char *name, int line, int col) {
    int c = peekc(p), vl = p->line, vc = p->col;
    buf b = {0};
    config_kind kind;
    if (c == '"' || c == '\'') {
        kind = CONFIG_STRING;
        if (buf_put(&b, "", 0) != 0) return fail(p, vl, vc, "out of memory");
        for (;;) {
            if (read_string(p, &b) != 0) goto err;
            skip_space(p);
            if (peekc(p) != '"' && peekc(p) != '\'') break;
        }
    } else {
        if (c == '-') {
            if (buf_put(&b, "-", 1) != 0) goto oom;
            advance(p);
            skip_space(p);
            c = peekc(p);
        }
        if (c != -1 && (isdigit(c) || c == '.')) {
            kind = CONFIG_NUMBER;
            size_t start = p->pos;
            while (peekc(p) != -1 && (isalnum(peekc(p)) || peekc(p) == '.' || peekc(p) == '_' ||
                                      ((peekc(p) == '-' || peekc(p) == '+') &&
                                       (p->s[p->pos - 1] == 'e' || p->s[p->pos - 1] == 'E'))))
                advance(p);
            if (buf_put(&b, p->s + start, p->pos - start) != 0) goto oom;
        } else if (is_ident_start(c)) {
            char *id = read_ident(p);
            if (!id) goto oom;
            int numeric = strcmp(id, "inf") == 0 || strcmp(id, "infinity") == 0 || strcmp(id, "nan") == 0;
            kind = (numeric || b.n) ? CONFIG_NUMBER : CONFIG_IDENT;
            if (b.n && !numeric) {
                free(id);
                fail(p, vl, vc, "expected a number after '-' for field '%s'", name);
                goto err;
            }
            int r = buf_put(&b, id, strlen(id));
            free(id);
            if (r != 0) goto oom;
        } else {
            if (c == -1) fail(p, vl, vc, "expected a value for field '%s', found the end of the file", name);
            else fail(p, vl, vc, "expected a value for field '%s', found '%c'", name, c);
            goto err;
        }
    }
    config_field *f = new_field(p, m, name, line, col);
    if (!f) goto err;
    f->kind = kind;
    f->text = b.d;
    f->text_len = b.n;
    return 0;
oom:
    fail(p, vl, vc, "out of memory");
err:
    free(b.d);
    return -1;
}

static int parse_field(parser *p, config_msg *m, int depth) {
    int line = p->line, col = p->col;
    char *name = read_ident(p);
    if (!name) {
        int c = peekc(p);
        return fail(p, line, col, "expected a field name, found '%c'", c);
    }
    int rc = -1;
    skip_space(p);
    int colon = 0;
    if (peekc(p) == ':') {
        colon = 1;
        advance(p);
        skip_space(p);
    }
    int c = peekc(p);
    if (c == '{' || c == '<') {
        rc = parse_sub(p, m, name, line, col, depth);
    } else if (!colon && c != '[') {
        rc = fail(p, p->line, p->col, "expected ':' or '{' after field name '%s'", name);
    } else if (c == '[') { /* without ':' only a list of messages, as protobuf's text format allows */
        int bl = p->line, bc = p->col;
        advance(p);
        skip_space(p);
        if (peekc(p) == ']') {
            advance(p);
            rc = 0;
        } else {
            for (;;) {
                skip_space(p);
                c = peekc(p);
                if (!colon && c != '{' && c != '<') {
                    rc = fail(p, bl, bc, "a list of scalars needs ':' after field name '%s'", name);
                    break;
                }
                rc = (c == '{' || c == '<') ? parse_sub(p, m, name, line, col, depth) : parse_scalar(p, m, name, line, col);
                if (rc != 0) break;
                skip_space(p);
                if (peekc(p) == ',') {
                    advance(p);
                    continue;
                }
                if (peekc(p) == ']') {
                    advance(p);
                    break;
                }
                rc = fail(p, p->line, p->col, "expected ',' or ']' in the list of field '%s'", name);
                break;
            }
        }
    } else {
        rc = parse_scalar(p, m, name, line, col);
    }
    free(name);
    if (rc == 0) {
        skip_space(p);
        if (peekc(p) == ',' || peekc(p) == ';') advance(p);
    }
    return rc;
}

/* Parses fields until `close` ('}' or '>', consumed) or, for the top level (close 0), the end of input. */
static int parse_message(parser *p, config_msg *m, int close, int depth, int line, int col) {
    for (;;) {
        skip_space(p);
        int c = peekc(p);
        if (c == -1) {
            if (close) return fail(p, line, col, "message opened here is not closed with '%c'", close);
            return 0;
        }
        if (close && c == close) {
            advance(p);
            return 0;
        }
        if (c == '}' || c == '>') return fail(p, p->line, p->col, "unexpected '%c'", c);
        if (parse_field(p, m, depth) != 0) return -1;
    }
}

int config_text_parse(const char *src, size_t len, config_msg *out, serve_error *e) {
    parser p = {.s = src, .len = len, .line = 1, .col = 1, .e = e};
    memset(out, 0, sizeof *out);
    if (memchr(src, 0, len)) {
        const char *z = memchr(src, 0, len);
        for (size_t i = 0; i < (size_t)(z - src); i++) advance(&p);
        return fail(&p, p.line, p.col, "NUL byte in the text");
    }
    if (parse_message(&p, out, 0, 0, 1, 1) != 0) {
        config_msg_free(out);
        return -1;
    }
    return 0;
}

void config_msg_free(config_msg *m) {
    if (!m) return;
    for (size_t i = 0; i < m->num_fields; i++) {
        free(m->fields[i].name);
        free(m->fields[i].text);
        config_msg_free(&m->fields[i].msg);
    }
    free(m->fields);
    m->fields = NULL;
    m->num_fields = 0;
}
