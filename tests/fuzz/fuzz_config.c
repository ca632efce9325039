/* libFuzzer target: config.pbtxt text -> the text-format parser (src/serve/config_text.c) and the ModelConfig
 * mapping (src/serve/config_model.c), then the config's JSON (GET /v2/models/{m}/config). A parsed config is
 * also completed against a small fixed model (examples/models/mlp.onnx, loaded once), as the repository does.
 * A refusal must say where and what ("line L, column C: ..."); a crash, sanitizer report or leak is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_model.h"
#include "config_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef FUZZ_CONFIG_MODEL
#error "FUZZ_CONFIG_MODEL (the path of the model configs are completed against) must be defined by the build"
#endif

static cinfer_model *g_model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        if (cinfer_model_load(FUZZ_CONFIG_MODEL, &g_model) != CINFER_OK) {
            fprintf(stderr, "fuzz_config: cannot load %s: %s\n", FUZZ_CONFIG_MODEL, cinfer_last_error());
            abort();
        }
        ready = 1;
    }
    serve_error err = {0};
    /* the generic parser alone (it accepts any field names) */
    config_msg msg;
    if (config_text_parse((const char *)data, size, &msg, &err) == 0) config_msg_free(&msg);
    else if (!strstr(err.msg, "line ")) { fprintf(stderr, "fuzz_config: error without a position: %s\n", err.msg); abort(); }

    model_config cfg;
    err = (serve_error){0};
    if (config_model_parse((const char *)data, size, "config.pbtxt", &cfg, &err) != 0) {
        if (!err.msg[0]) { fprintf(stderr, "fuzz_config: config_model_parse failed without a message\n"); abort(); }
        return 0;
    }
    json_t *j = config_model_to_json(&cfg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    free(s);
    json_decref(j);
    char note[512];
    if (config_model_complete(&cfg, g_model, 4, note, sizeof note, &err) == 0) {
        j = config_model_to_json(&cfg);
        json_decref(j);
    }
    config_model_free(&cfg);
    return 0;
}
