/* Joins the per-family schema tables (graph/op_families.h) into one lookup and says which family a schema is in. */
#include <string.h>

#include "graph/op_schema.h"

/* Indexed by family id, in the list's order (schema indices and lookup precedence follow it). */
static const op_schema *const family_tables[OP_FAMILY_COUNT] = {
#define FAMILY_TABLE_ENTRY(ID, name) [OP_FAMILY_##ID] = shape_##name##_schemas,
    OP_FAMILIES(FAMILY_TABLE_ENTRY)
#undef FAMILY_TABLE_ENTRY
};
#define NUM_FAMILIES ((size_t)OP_FAMILY_COUNT)

static const char *const family_names[OP_FAMILY_COUNT] = {
#define FAMILY_NAME_ENTRY(ID, name) [OP_FAMILY_##ID] = #name,
    OP_FAMILIES(FAMILY_NAME_ENTRY)
#undef FAMILY_NAME_ENTRY
};

const char *op_family_name(op_family family) {
    return (unsigned)family < (unsigned)OP_FAMILY_COUNT ? family_names[family] : NULL;
}

static bool is_default_domain(const char *domain) {
    return domain == NULL || domain[0] == '\0' || strcmp(domain, "ai.onnx") == 0;
}

const op_schema *op_schema_find(const char *domain, const char *op_type) {
    if (!is_default_domain(domain)) return NULL;
    for (size_t f = 0; f < NUM_FAMILIES; f++)
        for (const op_schema *s = family_tables[f]; s->op_type; s++)
            if (strcmp(s->op_type, op_type) == 0) return s;
    return NULL;
}

op_family op_schema_family(const op_schema *schema) {
    for (size_t f = 0; f < NUM_FAMILIES; f++)
        for (const op_schema *s = family_tables[f]; s->op_type; s++)
            if (s == schema) return (op_family)f;
    return OP_FAMILY_COUNT;
}

size_t op_schema_count(void) {
    size_t n = 0;
    for (size_t f = 0; f < NUM_FAMILIES; f++)
        for (const op_schema *s = family_tables[f]; s->op_type; s++) n++;
    return n;
}

const op_schema *op_schema_at(size_t index) {
    for (size_t f = 0; f < NUM_FAMILIES; f++)
        for (const op_schema *s = family_tables[f]; s->op_type; s++)
            if (index-- == 0) return s;
    return NULL;
}

int op_schema_index(const op_schema *schema) {
    int index = 0;
    for (size_t f = 0; f < NUM_FAMILIES; f++)
        for (const op_schema *s = family_tables[f]; s->op_type; s++, index++)
            if (s == schema) return index;
    return -1;
}
