// Smoke test of building a torch extension against the riscv64 root's libtorch:
// an op rvv_smoke::scale(Tensor x, float s) -> x * s, registered with TORCH_LIBRARY_FRAGMENT.
#include <torch/library.h>
#include <ATen/ATen.h>

namespace {
at::Tensor scale(const at::Tensor &x, double s) { return x * s; }
}  // namespace

TORCH_LIBRARY_FRAGMENT(rvv_smoke, m) {
    m.def("scale(Tensor x, float s) -> Tensor");
    m.impl("scale", c10::DispatchKey::CPU, TORCH_FN(scale));
}
