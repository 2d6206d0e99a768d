// The launch path a torch.compile'd graph takes into a tuned CuTe DSL kernel (see native_launch.py).
//
// Why C++: a graph reaches a custom op through torch's dispatcher; with a Python kernel behind it, each
// call crosses back into Python, converts every argument and pays that on top of the launch. Here the
// dispatcher calls this file's kernel directly: it checks the call against what its slot was bound for,
// allocates the output and calls the kernel's TVM-FFI function with plain integers, as the eager path's
// Python launcher does. Anything a slot was not bound for runs torch's own op instead, so a graph that
// outlives its binding (another process, a reset table) still computes the right product.
//
// Slots are written once, while a graph is traced (cudal2::native_bind), and read on every call; a
// slot's fields are filled before its ready flag is released.

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>
#include <tvm/ffi/c_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace {

constexpr int64_t kSlots = 4096;
constexpr int kArgs = 11;  // a, b, c, d, bias, workspace, flags, M, N, K, stream (the kernel's extents)

struct Slot {
  TVMFFIObjectHandle fn = nullptr;  // kept alive by the Python side (native_launch._bound)
  int64_t workspace = 0, flags = 0;  // 0: the kernel has none (its pointers then point at D, never read)
  int64_t km = 0, kn = 0, kk = 0;    // the kernel's extents (with swap_ab: N, M, K)
  bool swap = false;                 // the kernel's A is the caller's B
  int64_t m = 0, n = 0, k = 0;       // the call's extents
  c10::ScalarType dtype = c10::ScalarType::Half, out_dtype = c10::ScalarType::Half;
  c10::DeviceType device_type = c10::DeviceType::CUDA;
  int64_t device_index = 0;
  char a_layout = 'N', b_layout = 'T';  // the problem's layout letters (B = weight.T for linear)
  bool bias = false;
};

std::array<Slot, kSlots> slots;
std::array<std::atomic<bool>, kSlots> ready{};

// The layout letter of a 2-D operand as the table's problems name it: N row-major, T its transpose.
bool has_layout(const at::Tensor& t, char letter) {
  if (letter == 'N') return t.is_contiguous();
  return t.dim() == 2 && t.stride(0) == 1 && (t.size(1) == 1 || t.stride(1) == t.size(0));
}

bool same_device(const Slot& s, const at::Tensor& t) {
  return t.device().type() == s.device_type && (s.device_type != c10::DeviceType::CUDA || t.device().index() == s.device_index);
}

// Whether this call is the one the slot was bound for: anything else runs torch.
bool fits(const Slot& s, const at::Tensor& a, const at::Tensor& b_operand, const c10::optional<at::Tensor>& bias,
          int64_t m, int64_t n, int64_t k, bool b_layout_ok) {
  if (m != s.m || n != s.n || k != s.k) return false;
  if (a.scalar_type() != s.dtype || b_operand.scalar_type() != s.dtype) return false;
  if (!same_device(s, a) || !same_device(s, b_operand)) return false;
  if (!b_layout_ok) return false;
  if (bias.has_value() != s.bias) return false;
  if (s.bias) {
    const at::Tensor& c = *bias;
    if (c.dim() != 1 || c.size(0) != n || !c.is_contiguous() || c.scalar_type() != s.dtype || !same_device(s, c))
      return false;
  }
  // TMA loads need 16-byte aligned operands
  return ((reinterpret_cast<uintptr_t>(a.data_ptr()) | reinterpret_cast<uintptr_t>(b_operand.data_ptr())) & 15) == 0;
}

void set_int(TVMFFIAny& arg, int64_t value) {
  arg.type_index = kTVMFFIInt;
  arg.zero_padding = 0;
  arg.v_int64 = value;
}

int64_t current_stream(const at::Tensor& t) {
  if (t.device().type() != c10::DeviceType::CUDA) return 0;  // (a CPU test's kernel takes no stream)
  auto impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return reinterpret_cast<int64_t>(impl->getStream(t.device()).native_handle());
}

void call_kernel(const Slot& s, const at::Tensor& a, const at::Tensor& b_operand,
                 const c10::optional<at::Tensor>& bias, const at::Tensor& d) {
  int64_t pa = reinterpret_cast<int64_t>(a.data_ptr()), pb = reinterpret_cast<int64_t>(b_operand.data_ptr());
  if (s.swap) std::swap(pa, pb);
  const int64_t pd = reinterpret_cast<int64_t>(d.data_ptr());
  const int64_t values[kArgs] = {pa, pb, pd, pd, bias.has_value() ? reinterpret_cast<int64_t>(bias->data_ptr()) : pd,
                                 s.workspace ? s.workspace : pd, s.flags ? s.flags : pd, s.km, s.kn, s.kk,
                                 current_stream(a)};
  TVMFFIAny args[kArgs];
  for (int i = 0; i < kArgs; ++i) set_int(args[i], values[i]);
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  if (TVMFFIFunctionCall(s.fn, args, kArgs, &result) != 0) {
    TVMFFIObjectHandle error = nullptr;
    TVMFFIErrorMoveFromRaised(&error);
    std::string what = "the kernel's launch failed";
    if (error != nullptr) {
      const TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(error);
      what = std::string(cell->kind.data, cell->kind.size) + ": " + std::string(cell->message.data, cell->message.size);
      TVMFFIObjectDecRef(error);
    }
    TORCH_CHECK(false, "cudal2: tuned kernel launch failed (", what, ")");
  }
  if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
}

const Slot* bound(int64_t slot) {
  if (slot < 0 || slot >= kSlots || !ready[slot].load(std::memory_order_acquire)) return nullptr;
  return &slots[slot];
}

// cudal2::linear_slot: x @ weight.T (+ bias), x of any rank (its rows flattened), weight (N, K).
at::Tensor linear_slot(const at::Tensor& x, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                       int64_t slot) {
  const Slot* s = bound(slot);
  if (s != nullptr && x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1)) {
    const int64_t n = weight.size(0), k = weight.size(1), m = k ? x.numel() / k : 0;
    const bool weight_ok = s->b_layout == 'T' ? weight.is_contiguous() : weight.t().is_contiguous();
    if (has_layout(x, s->a_layout) && x.dim() >= (s->a_layout == 'N' ? 1 : 2) && fits(*s, x, weight, bias, m, n, k, weight_ok)) {
      std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
      sizes.back() = n;
      at::Tensor d = at::empty(sizes, x.options().dtype(s->out_dtype));
      call_kernel(*s, x, weight, bias, d);
      return d;
    }
  }
  return at::linear(x, weight, bias);
}

// cudal2::matmul_slot: a @ b, both 2-D.
at::Tensor matmul_slot(const at::Tensor& a, const at::Tensor& b, int64_t slot) {
  const Slot* s = bound(slot);
  if (s != nullptr && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0)) {
    const int64_t m = a.size(0), n = b.size(1), k = a.size(1);
    if (has_layout(a, s->a_layout) && fits(*s, a, b, c10::nullopt, m, n, k, has_layout(b, s->b_layout))) {
      at::Tensor d = at::empty({m, n}, a.options().dtype(s->out_dtype));
      call_kernel(*s, a, b, c10::nullopt, d);
      return d;
    }
  }
  return at::matmul(a, b);
}

// cudal2::native_bind: fill a slot (once; a slot is never rebound).
void native_bind(int64_t slot, int64_t fn, int64_t workspace, int64_t flags, int64_t km, int64_t kn, int64_t kk,
                 bool swap, int64_t m, int64_t n, int64_t k, c10::ScalarType dtype, c10::ScalarType out_dtype,
                 c10::Device device, c10::string_view layout, bool bias) {
  TORCH_CHECK(slot >= 0 && slot < kSlots, "cudal2: native slot ", slot, " out of range [0, ", kSlots, ")");
  TORCH_CHECK(!ready[slot].load(std::memory_order_acquire), "cudal2: native slot ", slot, " is already bound");
  TORCH_CHECK(layout.size() == 2, "cudal2: a layout is two letters, got '", std::string(layout), "'");
  Slot& s = slots[slot];
  s.fn = reinterpret_cast<TVMFFIObjectHandle>(fn);
  s.workspace = workspace, s.flags = flags, s.km = km, s.kn = kn, s.kk = kk, s.swap = swap;
  s.m = m, s.n = n, s.k = k, s.dtype = dtype, s.out_dtype = out_dtype;
  s.device_type = device.type(), s.device_index = device.has_index() ? device.index() : 0;
  s.a_layout = layout[0], s.b_layout = layout[1], s.bias = bias;
  ready[slot].store(true, std::memory_order_release);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(cudal2, m) {
  m.def("native_bind(int slot, int fn, int workspace, int flags, int km, int kn, int kk, bool swap, int m, int n, "
        "int k, ScalarType dtype, ScalarType out_dtype, Device device, str layout, bool bias) -> ()",
        &native_bind);
}

// The slot ops themselves are defined in Python (ops.py), which gives them a fake implementation.
TORCH_LIBRARY_IMPL(cudal2, CompositeExplicitAutograd, m) {
  m.impl("linear_slot", &linear_slot);
  m.impl("matmul_slot", &matmul_slot);
}

// Inference only: a gradient through the op is traced by AOTAutograd above it (ops._Linear), so the
// dispatcher skips the autograd keys rather than run their not-implemented check on every call.
TORCH_LIBRARY_IMPL(cudal2, Autograd, m) {
  m.impl("linear_slot", torch::CppFunction::makeFallthrough());
  m.impl("matmul_slot", torch::CppFunction::makeFallthrough());
}
