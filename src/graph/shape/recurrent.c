/* Op schemas of the recurrent family (shape and dtype inference). */
#include "core/status.h"
#include "graph/op_schema.h"

const op_schema shape_recurrent_schemas[] = {
    {NULL, NULL, 0, 0, 0, 0},
};
