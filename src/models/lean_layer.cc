#include "lean_layer.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

namespace infinipipe::models::lean {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Norms run in at least float32, as the eager layer and transformers do.
at::ScalarType compute_dtype(at::ScalarType dtype) { return at::promote_types(dtype, at::kFloat); }

// The norm's backward recomputes the normalised value n = x * rstd and returns
// dx = rstd * (dn - n * mean(dn * n)) with dn the gradient reaching n, and the gain's gradient
// (so a zero-bubble W reruns this node for it: a few element-wise passes).
struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& rstd) {
    at::Tensor out =
        at::empty({0}, x.options().dtype(at::promote_types(weight.scalar_type(), x.scalar_type())));
    rms_norm_into(out, x, weight, rstd);
    ctx->save_for_backward({x, weight, rstd});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2], &dy = grads[0];
    const at::Tensor n = x.to(rstd.scalar_type()) * rstd;
    const at::Tensor n_out = n.to(x.scalar_type());
    const at::Tensor dweight = (dy * n_out).reshape({-1, n_out.size(-1)}).sum(0);
    const at::Tensor dn = (dy * weight).to(rstd.scalar_type());
    const at::Tensor dx = rstd * (dn - n * (dn * n).mean({-1}, /*keepdim=*/true));
    return {dx.to(x.scalar_type()), dweight, at::Tensor()};
  }
};

// The backward recomputes SiLU's output with the forward's kernel, so its gradients are the
// eager ones.
struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return at::silu(gate) * up;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1], &dy = grads[0];
    return {at::silu_backward(dy * up, gate), dy * at::silu(gate)};
  }
};

}  // namespace

at::Tensor rms_rstd(const at::Tensor& x, double eps) {
  at::NoGradGuard no_grad;  // the norm's backward differentiates through it
  const at::Tensor h = x.to(compute_dtype(x.scalar_type()));
  return at::rsqrt(h.pow(2).mean({-1}, /*keepdim=*/true) + eps);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd) {
  return RmsNorm::apply(x, weight, rstd);
}

void rms_norm_into(at::Tensor& into, const at::Tensor& x, const at::Tensor& weight,
                   const at::Tensor& rstd) {
  at::mul_out(into, weight, (x.to(rstd.scalar_type()) * rstd).to(x.scalar_type()));
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwiGlu::apply(gate, up); }

void Refill::keep(const at::Tensor& tensor, Compute compute) {
  dropped_.push_back({tensor.detach(), tensor.storage().nbytes(), std::move(compute)});
}

void Refill::attach(const std::shared_ptr<Refill>& refill, const at::Tensor& output) {
  for (const Dropped& d : refill->dropped_) {
    c10::Storage storage = d.tensor.storage();
    storage.set_data_ptr_noswap(at::DataPtr(nullptr, storage.device()));
    storage.set_nbytes(0);
  }
  output.register_hook([refill](const at::TensorBase&) { refill->run(); });
}

void Refill::run() {
  at::NoGradGuard no_grad;
  for (Dropped& d : dropped_) {
    c10::Storage storage = d.tensor.storage();
    storage.set_data_ptr_noswap(storage.allocator()->allocate(d.nbytes));
    storage.set_nbytes(d.nbytes);
    at::Tensor into =
        at::empty({0}, d.tensor.options())
            .set_(storage, d.tensor.storage_offset(), d.tensor.sizes(), d.tensor.strides());
    d.compute(into);
  }
  dropped_.clear();  // one backward; and what the recipes hold goes now
}

}  // namespace infinipipe::models::lean
