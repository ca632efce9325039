"""ctypes binding of libcinfer for the Python test suites (node tests, model tests, benchmarks).

Only tests and tooling use it: the engine itself is C. Locate the library with CINFER_LIB or build/libcinfer.so.
"""
import ctypes
import os
import pathlib

import numpy as np

MAX_DIMS = 8

NP_TO_DTYPE = {
    np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
    np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
    np.dtype(np.float16): 10, np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13,
}
try:  # onnx depends on ml_dtypes, which gives numpy a bfloat16
    import ml_dtypes
    NP_TO_DTYPE[np.dtype(ml_dtypes.bfloat16)] = 16
except ImportError:
    pass
DTYPE_TO_NP = {v: k for k, v in NP_TO_DTYPE.items()}
STATUS_UNSUPPORTED = 3


class Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS), ("data", ctypes.c_void_p)]


class RunStats(ctypes.Structure):
    _fields_ = [("host_to_device_copies", ctypes.c_uint64), ("device_to_host_copies", ctypes.c_uint64),
                ("host_to_device_bytes", ctypes.c_uint64), ("device_to_host_bytes", ctypes.c_uint64),
                ("graph_replayed", ctypes.c_uint64), ("graph_captures", ctypes.c_uint64),
                ("graph_fallbacks", ctypes.c_uint64), ("caller_buffers_bound", ctypes.c_uint64)]


class Span(ctypes.Structure):
    """cinfer_span: one copy or stretch of compute of a run (session option timeline=1)."""
    _fields_ = [("kind", ctypes.c_int), ("stream", ctypes.c_int), ("bytes", ctypes.c_uint64),
                ("start_us", ctypes.c_double), ("end_us", ctypes.c_double)]


SPAN_KINDS = ("upload", "compute", "download", "device_copy")  # cinfer_span_kind order


class DeviceInfo(ctypes.Structure):
    _fields_ = [("index", ctypes.c_int), ("name", ctypes.c_char * 256), ("uuid", ctypes.c_char * 96),
                ("compute_major", ctypes.c_int), ("compute_minor", ctypes.c_int), ("total_memory", ctypes.c_size_t),
                ("free_memory", ctypes.c_size_t), ("multiprocessors", ctypes.c_int), ("pci_bus", ctypes.c_int),
                ("pci_device", ctypes.c_int), ("pci_domain", ctypes.c_int), ("failed", ctypes.c_int)]


class MemoryStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "allocated_bytes", "reserved_bytes", "active_blocks", "peak_allocated_bytes", "peak_reserved_bytes",
        "num_device_mallocs", "num_device_frees", "num_alloc_retries", "num_ooms", "inactive_split_bytes",
        "limit_bytes", "pinned_reserved_bytes")]


class OptionInfo(ctypes.Structure):
    """cinfer_option_info: one session option of the engine's table."""
    _fields_ = [("key", ctypes.c_char_p), ("is_prefix", ctypes.c_int), ("type", ctypes.c_char_p),
                ("values", ctypes.c_char_p), ("default_value", ctypes.c_char_p), ("doc", ctypes.c_char_p)]


class CinferError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


def selected_device():
    """The device the test suites run on: CINFER_TEST_DEVICE (e.g. "cuda", "cuda:1"), default "cpu"."""
    return os.environ.get("CINFER_TEST_DEVICE", "cpu")


def _find_library():
    env = os.environ.get("CINFER_LIB")
    if env:
        return env
    root = pathlib.Path(__file__).resolve().parents[2]
    return str(root / "build" / "libcinfer.so")


class Library:
    def __init__(self, path=None):
        self.lib = ctypes.CDLL(path or _find_library())
        L = self.lib
        L.cinfer_last_error.restype = ctypes.c_char_p
        L.cinfer_version.restype = ctypes.c_char_p
        L.cinfer_model_load_from_memory.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                                    ctypes.POINTER(ctypes.c_void_p)]
        L.cinfer_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.cinfer_model_free.argtypes = [ctypes.c_void_p]
        L.cinfer_model_num_outputs.argtypes = [ctypes.c_void_p]
        L.cinfer_model_num_outputs.restype = ctypes.c_size_t
        L.cinfer_session_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                            ctypes.POINTER(ctypes.c_void_p)]
        L.cinfer_session_free.argtypes = [ctypes.c_void_p]
        L.cinfer_session_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                         ctypes.POINTER(Tensor), ctypes.c_size_t]
        L.cinfer_session_run_into.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                              ctypes.POINTER(Tensor), ctypes.c_size_t]
        L.cinfer_tensor_free_data.argtypes = [ctypes.POINTER(Tensor)]
        L.cinfer_num_supported_ops.restype = ctypes.c_size_t
        L.cinfer_supported_op.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(ctypes.c_char_p)]

        L.cinfer_num_session_options.restype = ctypes.c_size_t
        L.cinfer_session_option_info.argtypes = [ctypes.c_size_t, ctypes.POINTER(OptionInfo)]
        L.cinfer_session_last_run_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(RunStats)]
        L.cinfer_session_num_host_nodes.argtypes = [ctypes.c_void_p]
        L.cinfer_session_num_host_nodes.restype = ctypes.c_size_t
        L.cinfer_session_num_fallback_nodes.argtypes = [ctypes.c_void_p]
        L.cinfer_session_num_fallback_nodes.restype = ctypes.c_size_t
        L.cinfer_session_fallback_node.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        L.cinfer_session_fallback_node.restype = ctypes.c_char_p
        L.cinfer_session_timeline.argtypes = [ctypes.c_void_p, ctypes.POINTER(Span), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_size_t)]
        L.cinfer_cuda_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
        L.cinfer_cuda_device_info.argtypes = [ctypes.c_int, ctypes.POINTER(DeviceInfo)]
        L.cinfer_cuda_memory_stats.argtypes = [ctypes.c_int, ctypes.POINTER(MemoryStats)]
        L.cinfer_cuda_set_memory_limit.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_double]
        L.cinfer_cuda_empty_cache.argtypes = [ctypes.c_int]
        L.cinfer_cuda_host_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        L.cinfer_cuda_host_free.argtypes = [ctypes.c_int, ctypes.c_void_p]
        L.cinfer_cuda_host_free.restype = None

    def cuda_devices(self):
        """(device infos, None) or ([], the reason no CUDA device is usable)."""
        n = ctypes.c_int()
        if self.lib.cinfer_cuda_device_count(ctypes.byref(n)) != 0:
            return [], self.lib.cinfer_last_error().decode(errors="replace")
        infos = []
        for d in range(n.value):
            info = DeviceInfo()
            self.check(self.lib.cinfer_cuda_device_info(d, ctypes.byref(info)))
            infos.append(info)
        return infos, None

    def cuda_memory_stats(self, device=0):
        st = MemoryStats()
        self.check(self.lib.cinfer_cuda_memory_stats(device, ctypes.byref(st)))
        return st

    def check(self, status):
        if status != 0:
            raise CinferError(status, self.lib.cinfer_last_error().decode(errors="replace"))

    def session_options(self):
        """The engine's session options (cinfer_session_option_info) as dicts: key, is_prefix, type, values,
        default_value, doc."""
        out = []
        for i in range(self.lib.cinfer_num_session_options()):
            info = OptionInfo()
            self.check(self.lib.cinfer_session_option_info(i, ctypes.byref(info)))
            out.append({name: (getattr(info, name).decode() if isinstance(getattr(info, name), bytes)
                               else getattr(info, name)) for name, _ in OptionInfo._fields_})
        return out

    def supported_ops(self):
        ops = set()
        for i in range(self.lib.cinfer_num_supported_ops()):
            name, backends = ctypes.c_char_p(), ctypes.c_char_p()
            self.check(self.lib.cinfer_supported_op(i, ctypes.byref(name), ctypes.byref(backends)))
            ops.add(name.value.decode())
        return ops


class Session:
    """A model loaded from bytes (or a path) and a session on it (device "cpu" unless given or set in
    CINFER_TEST_DEVICE, e.g. "cuda"); options: extra session options as a dict."""

    def __init__(self, lib, model_bytes=None, path=None, base_dir=None, threads=None, device=None, options=None):
        self.lib = lib
        self.model = ctypes.c_void_p()
        self.session = ctypes.c_void_p()
        if path is not None:
            lib.check(lib.lib.cinfer_model_load(str(path).encode(), ctypes.byref(self.model)))
        else:
            buf = ctypes.create_string_buffer(model_bytes, len(model_bytes))
            lib.check(lib.lib.cinfer_model_load_from_memory(buf, len(model_bytes),
                                                            base_dir.encode() if base_dir else None,
                                                            ctypes.byref(self.model)))
        self.device = device or selected_device()
        opts = {"threads": str(threads or 0), **(options or {})}
        keys = (ctypes.c_char_p * len(opts))(*[k.encode() for k in opts])
        vals = (ctypes.c_char_p * len(opts))(*[str(v).encode() for v in opts.values()])
        try:
            lib.check(lib.lib.cinfer_session_create(self.model, self.device.encode(), keys, vals, len(opts),
                                                    ctypes.byref(self.session)))
        except CinferError:
            lib.lib.cinfer_model_free(self.model)
            self.model = ctypes.c_void_p()  # __del__ must not free it again
            raise
        self.num_outputs = lib.lib.cinfer_model_num_outputs(self.model)

    def run_into(self, feeds, outputs):
        """cinfer_session_run_into: feeds as for run; outputs: one numpy array per model output (C-contiguous,
        writable), filled in place; dtype and shape describe the buffer to the engine."""
        ins, keep, n = self._input_tensors(feeds)
        outs = (Tensor * max(1, len(outputs)))()
        for k, arr in enumerate(outputs):
            if not (arr.flags.c_contiguous and arr.flags.writeable):
                raise ValueError("output arrays must be C-contiguous and writable")
            outs[k].dtype = NP_TO_DTYPE[arr.dtype]
            outs[k].ndim = arr.ndim
            for d in range(arr.ndim):
                outs[k].dims[d] = arr.shape[d]
            outs[k].data = arr.ctypes.data if arr.size else None
        self.lib.check(self.lib.lib.cinfer_session_run_into(self.session, ins, n, outs, len(outputs)))
        del keep
        return outputs

    def _input_tensors(self, feeds):
        """The cinfer_tensor array for feeds, the objects that must outlive the call, and the count."""
        items = list(feeds.items()) if isinstance(feeds, dict) else [(None, a) for a in feeds]
        arrays, names = [], []
        ins = (Tensor * max(1, len(items)))()
        for i, (name, arr) in enumerate(items):
            arr = np.require(arr, requirements="C")  # ascontiguousarray would turn 0-d into 1-d
            if arr.dtype not in NP_TO_DTYPE:
                raise CinferError(STATUS_UNSUPPORTED, f"input '{name}': numpy dtype {arr.dtype} has no cinfer dtype")
            arrays.append(arr)
            names.append(name.encode() if name is not None else None)
            ins[i].name = names[-1]
            ins[i].dtype = NP_TO_DTYPE[arr.dtype]
            ins[i].ndim = arr.ndim
            for d in range(arr.ndim):
                ins[i].dims[d] = arr.shape[d]
            ins[i].data = arr.ctypes.data if arr.size else None
        return ins, (arrays, names), len(items)

    def run(self, feeds):
        """feeds: dict name -> numpy array (or list in model input order). Returns list of numpy arrays."""
        ins, keep, n = self._input_tensors(feeds)
        outs = (Tensor * max(1, self.num_outputs))()
        self.lib.check(self.lib.lib.cinfer_session_run(self.session, ins, n, outs, self.num_outputs))
        del keep
        results = []
        for k in range(self.num_outputs):
            t = outs[k]
            dtype = DTYPE_TO_NP.get(t.dtype)
            shape = tuple(t.dims[d] for d in range(t.ndim))
            if dtype is None:
                arr = None
            else:
                n = int(np.prod(shape, dtype=np.int64)) if shape else 1
                nbytes = n * dtype.itemsize
                raw = ctypes.string_at(t.data, nbytes) if nbytes else b""
                arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
            self.lib.lib.cinfer_tensor_free_data(ctypes.byref(outs[k]))
            results.append(arr)
        return results

    def last_run_stats(self):
        st = RunStats()
        self.lib.check(self.lib.lib.cinfer_session_last_run_stats(self.session, ctypes.byref(st)))
        return st

    def fallback_nodes(self):
        """Names of the nodes a device session runs on the CPU (cinfer_session_fallback_node)."""
        count = self.lib.lib.cinfer_session_num_fallback_nodes(self.session)
        return [self.lib.lib.cinfer_session_fallback_node(self.session, i).decode() for i in range(count)]

    def timeline(self):
        """The last run's spans (session option timeline=1) as dicts: kind (a SPAN_KINDS name), stream, bytes,
        start_us, end_us."""
        count = ctypes.c_size_t()
        self.lib.check(self.lib.lib.cinfer_session_timeline(self.session, None, 0, ctypes.byref(count)))
        spans = (Span * max(1, count.value))()
        self.lib.check(self.lib.lib.cinfer_session_timeline(self.session, spans, count.value, ctypes.byref(count)))
        return [{"kind": SPAN_KINDS[s.kind], "stream": s.stream, "bytes": s.bytes, "start_us": s.start_us,
                 "end_us": s.end_us} for s in spans[:count.value]]

    def close(self):
        if self.session:
            self.lib.lib.cinfer_session_free(self.session)
            self.session = ctypes.c_void_p()
        if self.model:
            self.lib.lib.cinfer_model_free(self.model)
            self.model = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
