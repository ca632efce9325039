"""cinfer with torch tensors for the benchmark (bench/gpu/compare_pytorch.py): device-resident runs through
cinfer_session_run_device / cinfer_session_output_info (torch tensors' data_ptr(), torch's current stream) and
host runs through cinfer_session_run_into (into the caller's pinned outputs), on top of tests/python/cinfer_ctypes.py.

The ctypes tensor arrays of a run are built once per set of buffers (DeviceRun) so the timed call is one ctypes
call, as a C caller would make it.
"""
import ctypes
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from cinfer_ctypes import CinferError, Library, Session, Tensor  # noqa: E402,F401

TORCH_TO_DTYPE = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6, torch.int64: 7,
                  torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}
DTYPE_TO_TORCH = {v: k for k, v in TORCH_TO_DTYPE.items()}


def _tensor_array(tensors, names=None, with_data=True):
    arr = (Tensor * max(1, len(tensors)))()
    keep = []
    for i, t in enumerate(tensors):
        if not t.is_contiguous():
            raise ValueError(f"tensor {i} is not contiguous")
        if names is not None:
            keep.append(names[i].encode())
            arr[i].name = keep[-1]
        arr[i].dtype = TORCH_TO_DTYPE[t.dtype]
        arr[i].ndim = t.dim()
        for d in range(t.dim()):
            arr[i].dims[d] = t.shape[d]
        arr[i].data = t.data_ptr() if (with_data and t.numel()) else None
    return arr, keep


class DeviceSession(Session):
    """A cinfer session (Session from cinfer_ctypes) that also runs on torch tensors."""

    def __init__(self, lib, path, device, options=None, input_names=None):
        super().__init__(lib, path=path, device=device, options=options)
        L = lib.lib
        if not hasattr(L, "cinfer_session_run_device"):
            raise CinferError(3, "this libcinfer has no cinfer_session_run_device")
        L.cinfer_session_run_device.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                                ctypes.POINTER(Tensor), ctypes.c_size_t, ctypes.c_void_p]
        L.cinfer_session_output_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                                 ctypes.POINTER(Tensor), ctypes.c_size_t]
        self.input_names = input_names

    def output_info(self, inputs):
        """[(dtype as torch dtype, shape tuple)] of the outputs for these input tensors (their data is not read)."""
        ins, _keep = _tensor_array(inputs, self.input_names, with_data=False)
        outs = (Tensor * max(1, self.num_outputs))()
        self.lib.check(self.lib.lib.cinfer_session_output_info(self.session, ins, len(inputs), outs, self.num_outputs))
        return [(DTYPE_TO_TORCH[outs[k].dtype], tuple(outs[k].dims[d] for d in range(outs[k].ndim)))
                for k in range(self.num_outputs)]

    def empty_outputs(self, inputs):
        dev = inputs[0].device
        return [torch.empty(shape, dtype=dt, device=dev) for dt, shape in self.output_info(inputs)]

    def bind(self, inputs, outputs, stream=None):
        """A DeviceRun on these buffers; stream: a torch.cuda.Stream or None (the legacy default stream; CPU)."""
        return DeviceRun(self, inputs, outputs, stream)

    def run_into_raw(self, ins, outs):
        """cinfer_session_run_into on prebuilt arrays: the outputs land in the caller's tensors (pinned: by DMA)."""
        self.lib.check(self.lib.lib.cinfer_session_run_into(self.session, ins, len(ins), outs, self.num_outputs))


class DeviceRun:
    """One prebuilt cinfer_session_run_device call on fixed buffers: __call__ queues a run and returns."""

    def __init__(self, sess, inputs, outputs, stream=None):
        self.sess = sess
        self.inputs, self.outputs = inputs, outputs  # keep the buffers alive as long as the call can use them
        self.ins, self._keep = _tensor_array(inputs, sess.input_names)
        self.outs, _ = _tensor_array(outputs)
        for k, (dt, shape) in enumerate(sess.output_info(inputs)):
            if dt != outputs[k].dtype or shape != tuple(outputs[k].shape):
                raise ValueError(f"output {k}: the model gives {dt} {shape}, the buffer is {outputs[k].dtype} "
                                 f"{tuple(outputs[k].shape)}")
        self.stream = ctypes.c_void_p(stream.cuda_stream if stream is not None else None)
        self.n_in, self.n_out = len(inputs), len(outputs)
        self.fn = sess.lib.lib.cinfer_session_run_device
        self.handle = sess.session

    def __call__(self):
        st = self.fn(self.handle, self.ins, self.n_in, self.outs, self.n_out, self.stream)
        if st != 0:
            self.sess.lib.check(st)
