/* ONNX protobuf bytes -> graph IR (see onnx_loader.c). */
#ifndef CINFER_ONNX_LOADER_H
#define CINFER_ONNX_LOADER_H

#include "graph/graph.h"

/* Decodes a serialized ModelProto. base_dir (may be NULL) is the folder external data resolves in. */
cinfer_status onnx_load_graph(const void *bytes, size_t size, const char *base_dir, graph **out);

#endif
