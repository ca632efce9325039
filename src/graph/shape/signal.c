/* Op schemas of the signal family (shape and dtype inference). */
#include "core/status.h"
#include "graph/op_schema.h"

const op_schema shape_signal_schemas[] = {
    {NULL, NULL, 0, 0, 0, 0},
};
