/* Example of the cinfer C API: load an ONNX model, describe it, run it once on ones, print the outputs.
 * Build: cc run_model.c -lcinfer   Run: ./run_model model.onnx [batch]   (dynamic dims take `batch`) */
#include <stdio.h>
#include <stdlib.h>

#include "cinfer/cinfer.h"

static int check(cinfer_status st, const char *what) {
    if (st == CINFER_OK) return 0;
    fprintf(stderr, "%s failed: %s: %s\n", what, cinfer_status_name(st), cinfer_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.onnx [batch]\n", argv[0]);
        return 2;
    }
    int64_t batch = argc > 2 ? atoll(argv[2]) : 1;
    cinfer_model *model = NULL;
    cinfer_session *session = NULL;
    if (check(cinfer_model_load(argv[1], &model), "load")) return 1;
    if (check(cinfer_session_create(model, "cpu", NULL, NULL, 0, &session), "session")) {
        cinfer_model_free(model);
        return 1;
    }
    size_t num_inputs = cinfer_model_num_inputs(model), num_outputs = cinfer_model_num_outputs(model);
    cinfer_tensor *inputs = calloc(num_inputs + 1, sizeof *inputs);
    cinfer_tensor *outputs = calloc(num_outputs + 1, sizeof *outputs);
    int rc = 1;
    if (!inputs || !outputs) goto done;
    for (size_t i = 0; i < num_inputs; i++) {
        cinfer_value_info info;
        if (check(cinfer_model_input_info(model, i, &info), "input info")) goto done;
        inputs[i].name = info.name;
        inputs[i].dtype = info.dtype;
        inputs[i].ndim = info.ndim < 0 ? 0 : info.ndim;
        size_t count = 1;
        for (int d = 0; d < inputs[i].ndim; d++) {
            inputs[i].dims[d] = info.dims[d] >= 0 ? info.dims[d] : batch;
            count *= (size_t)inputs[i].dims[d];
        }
        inputs[i].data = calloc(count ? count : 1, cinfer_dtype_size(info.dtype));
        if (!inputs[i].data) goto done;
        if (info.dtype == CINFER_DTYPE_FLOAT)
            for (size_t k = 0; k < count; k++) ((float *)inputs[i].data)[k] = 1.0f;
        printf("input %s: %s, %d dims\n", info.name, cinfer_dtype_name(info.dtype), inputs[i].ndim);
    }
    if (check(cinfer_session_run(session, inputs, num_inputs, outputs, num_outputs), "run")) goto done;
    for (size_t k = 0; k < num_outputs; k++) {
        printf("output %s: %s [", outputs[k].name, cinfer_dtype_name(outputs[k].dtype));
        for (int d = 0; d < outputs[k].ndim; d++) printf(d ? ", %lld" : "%lld", (long long)outputs[k].dims[d]);
        printf("]\n");
        cinfer_tensor_free_data(&outputs[k]);
    }
    rc = 0;
done:
    if (inputs)
        for (size_t i = 0; i < num_inputs; i++) free(inputs[i].data);
    free(inputs);
    free(outputs);
    cinfer_session_free(session);
    cinfer_model_free(model);
    return rc;
}
