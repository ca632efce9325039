/* libFuzzer target: arbitrary bytes as an ONNX model -> load, plan and run on small inputs. Any crash,
 * sanitizer report or leak is a bug; refusing the bytes with an error is the expected outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/cinfer.h"

#define MAX_INPUT_ELEMENTS (1 << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cinfer_model *model = NULL;
    cinfer_session *session = NULL;
    if (cinfer_model_load_from_memory(data, size, NULL, &model) != CINFER_OK) return 0;
    const char *keys[] = {"threads"}, *values[] = {"1"};
    if (cinfer_session_create(model, "cpu", keys, values, 1, &session) != CINFER_OK) {
        cinfer_model_free(model);
        return 0;
    }
    size_t num_inputs = cinfer_model_num_inputs(model), num_outputs = cinfer_model_num_outputs(model);
    cinfer_tensor *inputs = calloc(num_inputs + 1, sizeof *inputs);
    cinfer_tensor *outputs = calloc(num_outputs + 1, sizeof *outputs);
    int ok = inputs && outputs;
    for (size_t i = 0; ok && i < num_inputs; i++) {
        cinfer_value_info info;
        cinfer_model_input_info(model, i, &info);
        inputs[i].name = info.name;
        inputs[i].dtype = info.dtype;
        inputs[i].ndim = info.ndim < 0 ? 1 : info.ndim;
        size_t count = 1;
        for (int d = 0; d < inputs[i].ndim; d++) {
            inputs[i].dims[d] = info.ndim < 0 || info.dims[d] < 0 ? 2 : info.dims[d];
            count *= (size_t)inputs[i].dims[d];
            if (count > MAX_INPUT_ELEMENTS) ok = 0; /* a model may declare huge inputs: not interesting */
        }
        size_t bytes = count * cinfer_dtype_size(info.dtype);
        inputs[i].data = ok ? calloc(bytes ? bytes : 1, 1) : NULL;
        if (!inputs[i].data) ok = 0;
        /* deterministic non-zero contents: small integers are valid indices for most Gathers */
        for (size_t b = 0; ok && b < bytes && cinfer_dtype_size(info.dtype) == 1; b++) ((uint8_t *)inputs[i].data)[b] = (uint8_t)(b & 1);
    }
    if (ok && cinfer_session_run(session, inputs, num_inputs, outputs, num_outputs) == CINFER_OK)
        for (size_t k = 0; k < num_outputs; k++) cinfer_tensor_free_data(&outputs[k]);
    for (size_t i = 0; inputs && i < num_inputs; i++) free(inputs[i].data);
    free(inputs);
    free(outputs);
    cinfer_session_free(session);
    cinfer_model_free(model);
    return 0;
}
