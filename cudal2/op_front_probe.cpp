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
// Each function answers -1 where it cannot tell (not a plain tensor or Parameter: a subclass's
// __torch_function__ decides what its methods answer; symbolic sizes; a device without streams; any error):
// the front then asks through the bindings, as without this library. No function raises or sets a Python
// error; each is called with the GIL held.
#include <torch/csrc/autograd/python_variable.h>
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
