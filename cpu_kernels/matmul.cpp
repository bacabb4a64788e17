// C = A x B on the CPU, with the Metal shaders' semantics: fp32 accumulation, the
// result rounded once to the dtype. A plain kernel, not a BLAS (there is one behind
// torch.matmul): it gives the public `matmul` op a CPU path that means what the MPS
// path means. Rows of C run in parallel; each row is built in an fp32 buffer as the
// sum over k of B's row k scaled by A[i, k] (i-k-j order: every inner loop reads B
// and writes the buffer with unit stride, in fp32 vectors).
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "torch_binding.h"
#include "torch_checks.h"
#include "vec_io.h"

namespace {

using inference_kernels::cpu::fVec;

template <typename T>
void matmul_rows(T* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k) {
  constexpr int64_t W = fVec::size();
  // ~64 KiB of B per task and row.
  at::parallel_for(0, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n * k, 1)),
                   [&](int64_t begin, int64_t end) {
    std::vector<float> row(n);
    for (int64_t i = begin; i < end; ++i) {
      std::fill(row.begin(), row.end(), 0.0f);
      for (int64_t kk = 0; kk < k; ++kk) {
        const float s = a[i * k + kk];
        const fVec sv(s);
        const float* br = b + kk * n;
        int64_t j = 0;
        for (; j + W <= n; j += W)
          at::vec::fmadd(sv, fVec::loadu(br + j), fVec::loadu(row.data() + j)).store(row.data() + j);
        for (; j < n; ++j) row[j] += s * br[j];
      }
      T* ci = c + i * n;
      for (int64_t j = 0; j < n; ++j) ci[j] = static_cast<T>(row[j]);
    }
  });
}

}  // namespace

void matmul_cpu(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  inference_kernels::check_matmul_args(out, a, b, c10::DeviceType::CPU);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  // fp32 copies (any layout in): the kernel reads dense fp32 rows.
  const at::Tensor af = a.to(at::kFloat).contiguous();
  const at::Tensor bf = b.to(at::kFloat).contiguous();
  IK_DISPATCH_FLOAT_TYPES(out.scalar_type(), "matmul_cpu", [&] {
    matmul_rows<scalar_t>(out.data_ptr<scalar_t>(), af.const_data_ptr<float>(),
                          bf.const_data_ptr<float>(), m, n, k);
  });
}
