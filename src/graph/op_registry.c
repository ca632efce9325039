/* Joins the per-family schema tables into one lookup. */
#include <string.h>

#include "graph/op_schema.h"

static const op_schema *const family_tables[] = {
    shape_elementwise_schemas, shape_linalg_schemas, shape_conv_schemas,
    shape_reduce_schemas,      shape_movement_schemas, shape_attention_schemas,
    shape_image_schemas,       shape_misc_schemas,     shape_recurrent_schemas, shape_signal_schemas,
};
#define NUM_FAMILIES (sizeof family_tables / sizeof family_tables[0])

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
