// What cudal2.linear's C front (op_front.c) asks of a call's input, read from torch's own C++ objects.
//
// Why. The front's row test sends a call to torch where x's element count is one that no kernel serves for
// its weight's shape (a shape served at other row counts), or one served only while a CUDA graph captures,
// where none does. Asked through torch's Python bindings (x.numel(); x.get_device(), the current raw stream,
// whether it captures), the test cost +0.54 us (the count) and +0.85 us (the count and the capture) over
// F.linear in situ on the lent H200 hosts, against +0.20 us for a weight whose every call runs torch
// (benchmarks/op_fallback_paths.py, 2026-11-30); the bar for the whole fallback is 0.3 us. Here the same
// answers are a few loads from the tensor and the stream.
//
// The fallback itself. torch's F.linear parses its arguments against its signature and looks for
// __torch_function__ overrides before it calls at::linear; where the front already knows what it holds (plain
// tensors, no torch function mode), cudal2_probe_linear calls at::linear as that binding does, without the
// parse. The dispatcher below it is the same (autograd, autocast, dispatch modes, the profiler's record).
//
// Each function answers -1 where it cannot tell (not a plain tensor or Parameter: a subclass's
// __torch_function__ decides what its methods answer; symbolic sizes; a device without streams; any error):
// the front then asks through the bindings, as without this library. No function raises or sets a Python
// error; each is called with the GIL held.
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/Functions.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>

namespace {

// The CUDA driver's cuStreamIsCapturing (a runtime stream is a driver stream), looked up in the driver that
// torch has loaded; null where it has not.
using StreamIsCapturing = int (*)(void* stream, int* status);

StreamIsCapturing stream_is_capturing() {
  static StreamIsCapturing found = nullptr;
  if (found == nullptr) {
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
      found = reinterpret_cast<StreamIsCapturing>(dlsym(driver, "cuStreamIsCapturing"));
    }
  }
  return found;
}

// Notes whether a warning was issued (the probe's linear then leaves the call to F.linear, which issues it).
struct Noticed : c10::WarningHandler {
  bool any = false;
  void process(const c10::Warning&) override { any = true; }
};

// The GIL released for the scope's life, taken again however it ends (a return or a throw).
struct WithoutGil {
  PyThreadState* saved = PyEval_SaveThread();
  ~WithoutGil() { PyEval_RestoreThread(saved); }
};

at::Tensor linear_of(const at::Tensor& input, const at::Tensor& weight, PyObject* bias) {
  return bias == Py_None ? at::linear(input, weight) : at::linear(input, weight, THPVariable_Unpack(bias));
}

}  // namespace

// x's element count, or -1.
extern "C" long long cudal2_probe_numel(PyObject* x) noexcept {
  if (!THPVariable_CheckExact(x)) {
    return -1;
  }
  try {
    return THPVariable_Unpack(x).numel();
  } catch (...) {  // (symbolic sizes)
    return -1;
  }
}

// 1 where no CUDA graph can record a call on x now, 0 where one captures on the current stream of x's device,
// -1 where that cannot be told. As ops._captured_now: a CPU tensor's call is never captured, nor one on the
// legacy default stream (raw handle 0), where no capture runs; otherwise the driver answers for that stream.
extern "C" int cudal2_probe_uncaptured(PyObject* x) noexcept {
  if (!THPVariable_CheckExact(x)) {
    return -1;
  }
  try {
    const c10::Device device = THPVariable_Unpack(x).device();
    if (device.is_cpu()) {
      return 1;
    }
    if (!device.is_cuda()) {
      return -1;
    }
    void* stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
    if (stream == nullptr) {
      return 1;
    }
    StreamIsCapturing is_capturing = stream_is_capturing();
    int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
    if (is_capturing == nullptr || is_capturing(stream, &status) != 0) {
      return -1;
    }
    return status == 0 ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// F.linear(x, weight, bias) through at::linear: x, weight and bias (None, or a tensor) plain tensors or Parameters,
// and no torch function mode on; else null with no error set (an override decides: the front calls F.linear). Also
// null, no error, where at::linear raised or warned: F.linear then runs the call again and raises or warns as
// torch does (its binding turns them into Python's exceptions and warnings; a failed or warned call is rare, and
// linear writes nothing but its result). The GIL: released around a CPU call, as torch's binding releases it (the
// call computes); held around a GPU call, which enqueues a kernel, as the op's own kernel launchers hold it.
// Releasing and taking it again cost about 0.3 us a call on the project's development CPU, more than the parse saved
// (2026-11-30).
extern "C" PyObject* cudal2_probe_linear(PyObject* x, PyObject* weight, PyObject* bias) noexcept {
  if (!THPVariable_CheckExact(x) || !THPVariable_CheckExact(weight) ||
      (bias != Py_None && !THPVariable_CheckExact(bias)) || at::impl::torch_function_mode_enabled()) {
    return nullptr;
  }
  try {
    const at::Tensor& input = THPVariable_Unpack(x);
    const at::Tensor& w = THPVariable_Unpack(weight);
    Noticed noticed;
    at::Tensor out;
    {
      c10::WarningUtils::WarningHandlerGuard guard(&noticed);
      if (input.is_cpu()) {
        WithoutGil released;
        out = linear_of(input, w, bias);
      } else {
        out = linear_of(input, w, bias);
      }
    }
    return noticed.any ? nullptr : THPVariable_Wrap(std::move(out));
  } catch (...) {
    return nullptr;
  }
}
