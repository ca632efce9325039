/* ONNX ModelProto -> graph IR, through protobuf-c code generated at build time from onnx.proto.
 *
 * Handles the default domain from opset 1 (models older than opset 13 are mapped onto today's semantics by
 * opset_upgrade.c), initializers in every storage form (typed fields, raw_data, external data files that must stay
 * inside the model's folder), Constant nodes and symbolic dims. Sequence/optional/sparse values are refused with a clear message.
 */
#include "onnx/onnx_loader.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "onnx.pb-c.h"
#include "onnx/contrib_ops.h"
#include "onnx/opset_upgrade.h"

/* Resolves an external data file that must stay inside base_dir and hold `expected` bytes at `offset`.
 * Checked before any allocation, so a small model cannot make cinfer allocate what the file does not hold. */
static cinfer_status resolve_external(const char *base_dir, const char *tensor_name, const char *location, int64_t offset,
                                      int64_t length, size_t expected, char real_file[PATH_MAX]) {
    if (!base_dir)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "initializer '%s': external data '%s' but the model was loaded from memory without a folder",
                          tensor_name, location);
    if (location[0] == '/' || strstr(location, ".."))
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "initializer '%s': external data path '%s' escapes the model's folder", tensor_name, location);
    char path[PATH_MAX], real_base[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", base_dir, location);
    if (!realpath(base_dir, real_base) || !realpath(path, real_file))
        return core_error(CINFER_ERR_IO, "initializer '%s': cannot open external data file '%s': %s", tensor_name, path,
                          strerror(errno));
    size_t base_len = strlen(real_base);
    if (strncmp(real_file, real_base, base_len) != 0 || real_file[base_len] != '/')
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "initializer '%s': external data path '%s' escapes the model's folder", tensor_name, location);
    if (length >= 0 && (size_t)length != expected)
        return core_error(CINFER_ERR_INVALID_MODEL, "initializer '%s': external length %lld but shape needs %zu bytes",
                          tensor_name, (long long)length, expected);
    struct stat st;
    if (stat(real_file, &st) != 0 || offset < 0 || (uint64_t)st.st_size < (uint64_t)offset ||
        (uint64_t)st.st_size - (uint64_t)offset < expected)
        return core_error(CINFER_ERR_INVALID_MODEL, "initializer '%s': external file '%s' is shorter than offset %lld + %zu bytes",
                          tensor_name, location, (long long)offset, expected);
    return CINFER_OK;
}

static cinfer_status read_external(const char *tensor_name, const char *real_file, int64_t offset, void *dst, size_t bytes) {
    FILE *f = fopen(real_file, "rb");
    if (!f) return core_error(CINFER_ERR_IO, "initializer '%s': cannot open '%s': %s", tensor_name, real_file, strerror(errno));
    cinfer_status st = CINFER_OK;
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, bytes, f) != bytes)
        st = core_error(CINFER_ERR_IO, "initializer '%s': cannot read %zu bytes from '%s'", tensor_name, bytes, real_file);
    fclose(f);
    return st;
}

/* Number of values a TensorProto holds inline in the typed field its data type uses. */
static size_t typed_field_count(const Onnx__TensorProto *tp, cinfer_dtype dtype) {
    switch (dtype) {
    case CINFER_DTYPE_FLOAT: return tp->n_float_data;
    case CINFER_DTYPE_DOUBLE: return tp->n_double_data;
    case CINFER_DTYPE_INT64: return tp->n_int64_data;
    case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64: return tp->n_uint64_data;
    default: return tp->n_int32_data; /* int32 and narrower, bool, float16, bfloat16: widened to int32 */
    }
}

static bool supported_tensor_dtype(int32_t t) {
    return t != CINFER_DTYPE_STRING && cinfer_dtype_size((cinfer_dtype)t) != 0;
}

/* Decodes a TensorProto into an owned host tensor. */
static cinfer_status decode_tensor(const Onnx__TensorProto *tp, const char *base_dir, tensor *out) {
    const char *name = tp->name ? tp->name : "(unnamed)";
    memset(out, 0, sizeof *out);
    if (!supported_tensor_dtype(tp->data_type))
        return core_error(CINFER_ERR_UNSUPPORTED, "tensor '%s': data type %d is not supported", name, tp->data_type);
    if (tp->n_dims > CINFER_MAX_DIMS)
        return core_error(CINFER_ERR_UNSUPPORTED, "tensor '%s': %zu dims, at most %d are supported", name, tp->n_dims,
                          CINFER_MAX_DIMS);
    out->dtype = (cinfer_dtype)tp->data_type;
    out->ndim = (int)tp->n_dims;
    int64_t numel = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0 || (tp->dims[i] > 0 && numel > INT64_MAX / tp->dims[i]))
            return core_error(CINFER_ERR_INVALID_MODEL, "tensor '%s': invalid dim %lld", name, (long long)tp->dims[i]);
        out->dims[i] = tp->dims[i];
        numel *= tp->dims[i];
    }
    size_t esize = cinfer_dtype_size(out->dtype);
    if ((uint64_t)numel > (uint64_t)SIZE_MAX / esize / 2)
        return core_error(CINFER_ERR_INVALID_MODEL, "tensor '%s': %lld elements is too large", name, (long long)numel);
    size_t bytes = (size_t)numel * esize;

    /* check that the data is really there before allocating what the dims claim */
    bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    char real_file[PATH_MAX], shape[160];
    int64_t offset = 0;
    if (external) {
        const char *location = NULL;
        int64_t length = -1;
        for (size_t i = 0; i < tp->n_external_data; i++) {
            const char *k = tp->external_data[i]->key, *v = tp->external_data[i]->value;
            if (!k || !v) continue;
            if (strcmp(k, "location") == 0) location = v;
            else if (strcmp(k, "offset") == 0) offset = strtoll(v, NULL, 10);
            else if (strcmp(k, "length") == 0) length = strtoll(v, NULL, 10);
        }
        if (!location) return core_error(CINFER_ERR_INVALID_MODEL, "tensor '%s': external data without a location", name);
        CINFER_TRY(resolve_external(base_dir, name, location, offset, length, bytes, real_file));
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != bytes)
            return core_error(CINFER_ERR_INVALID_MODEL, "tensor '%s': raw_data has %zu bytes, %s %s needs %zu", name,
                              tp->raw_data.len, cinfer_dtype_name(out->dtype), tensor_shape_str(out, shape, sizeof shape), bytes);
    } else if (typed_field_count(tp, out->dtype) != (size_t)numel) {
        return core_error(CINFER_ERR_INVALID_MODEL, "tensor '%s': holds %zu values, its shape %s needs %lld", name,
                          typed_field_count(tp, out->dtype), tensor_shape_str(out, shape, sizeof shape), (long long)numel);
    }

    out->data = core_aligned_alloc(bytes);
    if (!out->data) return core_error(CINFER_ERR_OUT_OF_MEMORY, "tensor '%s': cannot allocate %zu bytes", name, bytes);
    cinfer_status st = CINFER_OK;
    if (external) {
        st = read_external(name, real_file, offset, out->data, bytes);
    } else if (tp->has_raw_data) {
        if (bytes) memcpy(out->data, tp->raw_data.data, bytes);
    } else {
        switch (out->dtype) {
        case CINFER_DTYPE_FLOAT:
            if (bytes) memcpy(out->data, tp->float_data, bytes);
            break;
        case CINFER_DTYPE_DOUBLE:
            if (bytes) memcpy(out->data, tp->double_data, bytes);
            break;
        case CINFER_DTYPE_INT64:
            if (bytes) memcpy(out->data, tp->int64_data, bytes);
            break;
        case CINFER_DTYPE_UINT32: case CINFER_DTYPE_UINT64:
            for (int64_t i = 0; i < numel; i++) {
                if (out->dtype == CINFER_DTYPE_UINT32) ((uint32_t *)out->data)[i] = (uint32_t)tp->uint64_data[i];
                else ((uint64_t *)out->data)[i] = tp->uint64_data[i];
            }
            break;
        default:
            for (int64_t i = 0; i < numel; i++) {
                int32_t v = tp->int32_data[i];
                switch (esize) {
                case 1: ((uint8_t *)out->data)[i] = (uint8_t)v; break;
                case 2: ((uint16_t *)out->data)[i] = (uint16_t)v; break;
                default: ((int32_t *)out->data)[i] = v; break;
                }
            }
            break;
        }
    }
    if (st != CINFER_OK) {
        core_aligned_free(out->data);
        out->data = NULL;
    }
    return st;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static cinfer_status convert_attr(const Onnx__AttributeProto *ap, const char *node_name, const char *base_dir,
                                  graph_attr *a) {
    memset(a, 0, sizeof *a);
    a->name = dup_or_empty(ap->name);
    if (!a->name) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    a->type = (attr_type)ap->type;
    switch (ap->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a->f = ap->f; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a->i = ap->i; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
        a->s = malloc(ap->s.len + 1);
        if (!a->s) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        if (ap->s.len) memcpy(a->s, ap->s.data, ap->s.len);
        a->s[ap->s.len] = '\0';
        a->n = ap->s.len;
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
        a->n = ap->n_floats;
        a->floats = malloc(sizeof(float) * (a->n ? a->n : 1));
        if (!a->floats) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        if (a->n) memcpy(a->floats, ap->floats, sizeof(float) * a->n);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
        a->n = ap->n_ints;
        a->ints = malloc(sizeof(int64_t) * (a->n ? a->n : 1));
        if (!a->ints) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        if (a->n) memcpy(a->ints, ap->ints, sizeof(int64_t) * a->n);
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
        a->n = ap->n_strings;
        a->strings = calloc(a->n ? a->n : 1, sizeof(char *));
        if (!a->strings) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < a->n; i++) {
            a->strings[i] = malloc(ap->strings[i].len + 1);
            if (!a->strings[i]) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
            if (ap->strings[i].len) memcpy(a->strings[i], ap->strings[i].data, ap->strings[i].len);
            a->strings[i][ap->strings[i].len] = '\0';
        }
        break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
        if (!ap->t) return core_error(CINFER_ERR_INVALID_MODEL, "node '%s': tensor attribute '%s' has no tensor", node_name, a->name);
        if (decode_tensor(ap->t, base_dir, &a->t) != CINFER_OK)
            return core_error_prefix(CINFER_ERR_INVALID_MODEL, "node '%s' attribute '%s': ", node_name, a->name);
        break;
    default:
        /* graphs, sparse tensors, type protos: kept as a typed marker; ops needing them are unsupported */
        break;
    }
    return CINFER_OK;
}

/* Fills a value's static dtype and shape from a ValueInfoProto; non-tensor types are refused. */
static cinfer_status apply_value_info(graph_value *v, const Onnx__ValueInfoProto *vi, bool strict) {
    const Onnx__TypeProto *tp = vi->type;
    if (!tp) return CINFER_OK;
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!strict) return CINFER_OK;
        return core_error(CINFER_ERR_UNSUPPORTED, "value '%s': only tensor types are supported (sequences, maps, "
                          "optionals and sparse tensors are not)", v->name);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (tt->has_elem_type) v->dtype = (cinfer_dtype)tt->elem_type;
    if (strict && !supported_tensor_dtype(tt->elem_type))
        return core_error(CINFER_ERR_UNSUPPORTED, "value '%s': element type %d is not supported", v->name, tt->elem_type);
    if (!tt->shape) return CINFER_OK;
    if (tt->shape->n_dim > CINFER_MAX_DIMS)
        return core_error(CINFER_ERR_UNSUPPORTED, "value '%s': rank %zu exceeds %d", v->name, tt->shape->n_dim, CINFER_MAX_DIMS);
    v->ndim = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        free(v->dim_names[i]);
        v->dim_names[i] = NULL;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            v->dims[i] = d->dim_value;
        } else {
            v->dims[i] = -1;
            if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param)
                v->dim_names[i] = strdup(d->dim_param);
        }
    }
    return CINFER_OK;
}

static cinfer_status build_graph(const Onnx__ModelProto *mp, const char *base_dir, graph *g) {
    const Onnx__GraphProto *gp = mp->graph;
    if (!gp) return core_error(CINFER_ERR_INVALID_MODEL, "the file holds no graph (is it an ONNX model?)");
    g->name = dup_or_empty(gp->name);
    g->base_dir = base_dir ? strdup(base_dir) : NULL;

    g->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (!o->domain || o->domain[0] == '\0' || strcmp(o->domain, "ai.onnx") == 0) g->opset = o->version;
    }
    if (g->opset < 0) {
        if (mp->n_opset_import == 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "the model imports no opset (is it an ONNX model?)");
        g->opset = OPSET_UPGRADE_TARGET; /* uses only other domains; their ops get refused by name below */
    }
    if (g->opset < 1)
        return core_error(CINFER_ERR_INVALID_MODEL, "the model imports default-domain opset %lld; opsets start at 1",
                          (long long)g->opset);

    if (gp->n_sparse_initializer)
        return core_error(CINFER_ERR_UNSUPPORTED, "sparse initializers are not supported");

    /* initializers become constants */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !tp->name[0]) return core_error(CINFER_ERR_INVALID_MODEL, "initializer %zu has no name", i);
        int vi = graph_intern_value(g, tp->name);
        if (vi < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        graph_value *v = &g->values[vi];
        if (v->kind == VALUE_CONSTANT)
            return core_error(CINFER_ERR_INVALID_MODEL, "initializer '%s' is defined twice", tp->name);
        CINFER_TRY(decode_tensor(tp, base_dir, &v->constant));
        v->kind = VALUE_CONSTANT;
        v->dtype = v->constant.dtype;
        v->ndim = v->constant.ndim;
        for (int d = 0; d < v->ndim; d++) v->dims[d] = v->constant.dims[d];
    }

    /* model inputs (those with an initializer of the same name are constants with a default) */
    g->inputs = malloc(sizeof(int) * (gp->n_input ? gp->n_input : 1));
    if (!g->inputs) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vp = gp->input[i];
        if (!vp->name || !vp->name[0]) return core_error(CINFER_ERR_INVALID_MODEL, "model input %zu has no name", i);
        int vi = graph_intern_value(g, vp->name);
        if (vi < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        if (g->values[vi].kind == VALUE_CONSTANT) continue;
        if (g->values[vi].kind == VALUE_INPUT)
            return core_error(CINFER_ERR_INVALID_MODEL, "model input '%s' is listed twice", vp->name);
        g->values[vi].kind = VALUE_INPUT;
        CINFER_TRY(apply_value_info(&g->values[vi], vp, true));
        if (g->values[vi].dtype == CINFER_DTYPE_UNDEFINED)
            return core_error(CINFER_ERR_INVALID_MODEL, "model input '%s' has no element type", vp->name);
        g->inputs[g->num_inputs++] = vi;
    }

    /* nodes */
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        if (!np->op_type || !np->op_type[0]) return core_error(CINFER_ERR_INVALID_MODEL, "node %zu has no op_type", i);
        int ins[GRAPH_MAX_NODE_IO], outs[GRAPH_MAX_NODE_IO];
        if (np->n_input > GRAPH_MAX_NODE_IO || np->n_output > GRAPH_MAX_NODE_IO)
            return core_error(CINFER_ERR_UNSUPPORTED, "node %zu (%s): %zu inputs and %zu outputs, at most %d each are supported",
                              i, np->op_type, np->n_input, np->n_output, GRAPH_MAX_NODE_IO);
        for (size_t k = 0; k < np->n_input; k++) {
            ins[k] = -1;
            if (np->input[k] && np->input[k][0]) {
                ins[k] = graph_intern_value(g, np->input[k]);
                if (ins[k] < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
            }
        }
        for (size_t k = 0; k < np->n_output; k++) {
            outs[k] = -1;
            if (np->output[k] && np->output[k][0]) {
                outs[k] = graph_intern_value(g, np->output[k]);
                if (outs[k] < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
            }
        }
        char fallback[96];
        const char *name = np->name && np->name[0] ? np->name : (snprintf(fallback, sizeof fallback, "%s_%zu", np->op_type, i), fallback);
        const char *domain = np->domain ? np->domain : "";
        int64_t opset = g->opset;
        if (domain[0] && strcmp(domain, "ai.onnx") != 0) {
            opset = 1;
            for (size_t o = 0; o < mp->n_opset_import; o++)
                if (mp->opset_import[o]->domain && strcmp(mp->opset_import[o]->domain, domain) == 0)
                    opset = mp->opset_import[o]->version;
        }
        int ni = graph_add_node(g, name, np->op_type, domain, opset, ins, (int)np->n_input, outs, (int)np->n_output);
        if (ni < 0) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        graph_node *n = &g->nodes[ni];
        static const char *const internal_ops[][2] = {{"ElementwiseChain", "fused elementwise steps"},
                                                      {"LookupConcat", "fused table lookups"}};
        for (size_t k = 0; np->op_type && (!domain[0] || !strcmp(domain, "ai.onnx")) && k < 2; k++)
            if (strcmp(np->op_type, internal_ops[k][0]) == 0)
                return core_error(CINFER_ERR_INVALID_MODEL, "node '%s': op '%s' is internal to cinfer (the optimiser's "
                                  "%s) and may not appear in a model file", n->name, internal_ops[k][0],
                                  internal_ops[k][1]);
        n->attrs = calloc(np->n_attribute ? np->n_attribute : 1, sizeof(graph_attr));
        if (!n->attrs) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t a = 0; a < np->n_attribute; a++) {
            const char *an = np->attribute[a]->name;
            if (an && strncmp(an, "cinfer_", 7) == 0) /* the optimiser's own (fused forms): never from a file */
                return core_error(CINFER_ERR_INVALID_MODEL, "node '%s': attribute '%s' is internal to cinfer and may "
                                  "not appear in a model file", n->name, an);
            n->num_attrs++;
            CINFER_TRY(convert_attr(np->attribute[a], n->name, base_dir, &n->attrs[a]));
        }
    }
    g->num_nodes_original = g->num_nodes;

    /* intermediate value_info: static shapes where the exporter gave them (not required) */
    for (size_t i = 0; i < gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vp = gp->value_info[i];
        if (!vp->name) continue;
        int vi = graph_find_value(g, vp->name);
        if (vi >= 0 && g->values[vi].kind == VALUE_INTERMEDIATE) CINFER_TRY(apply_value_info(&g->values[vi], vp, false));
    }
    /* outputs */
    g->outputs = malloc(sizeof(int) * (gp->n_output ? gp->n_output : 1));
    if (!g->outputs) return core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vp = gp->output[i];
        if (!vp->name || !vp->name[0]) return core_error(CINFER_ERR_INVALID_MODEL, "model output %zu has no name", i);
        int vi = graph_find_value(g, vp->name);
        if (vi < 0)
            return core_error(CINFER_ERR_INVALID_MODEL, "model output '%s' is not produced by any node, input or initializer",
                              vp->name);
        graph_value *v = &g->values[vi];
        if (v->kind == VALUE_INTERMEDIATE) CINFER_TRY(apply_value_info(v, vp, true));
        v->is_output = true;
        g->outputs[g->num_outputs++] = vi;
    }
    if (g->num_outputs == 0) return core_error(CINFER_ERR_INVALID_MODEL, "the model declares no outputs");
    /* last: some mappings use the static dtypes and ranks value_info gives, and which values are model outputs */
    return onnx_upgrade_opset(g);
}

cinfer_status onnx_load_graph(const void *bytes, size_t size, const char *base_dir, graph **out) {
    *out = NULL;
    if (!bytes || size == 0) return core_error(CINFER_ERR_INVALID_MODEL, "empty model data");
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, bytes);
    if (!mp)
        return core_error(CINFER_ERR_INVALID_MODEL,
                          "not a valid ONNX protobuf (%zu bytes could not be decoded: truncated or corrupt file?)", size);
    graph *g = graph_create();
    cinfer_status st = g ? build_graph(mp, base_dir, g) : core_error(CINFER_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == CINFER_OK) st = onnx_lower_contrib_ops(g); /* com.microsoft nodes -> default-domain ones */
    onnx__model_proto__free_unpacked(mp, NULL);
    if (st != CINFER_OK) {
        graph_free(g);
        return st;
    }
    *out = g;
    return CINFER_OK;
}
