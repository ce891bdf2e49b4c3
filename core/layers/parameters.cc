#include "core/layers/parameters.h"

#include <algorithm>

#include "base/allocator.h"
#include "kernels/elementwise.h"

namespace moe {

ParameterSet::ParameterSet(Context* ctx, DType act) : ctx_(ctx), act_(act) {
  MOE_CHECK(ctx != nullptr, "ParameterSet needs a context");
  MOE_CHECK(dtype_is_floating(act), "ParameterSet: activation dtype ", dtype_name(act));
}

Parameter& ParameterSet::add(const std::string& name, Shape shape, ParamKind kind,
                             bool weight_decay, bool matmul) {
  MOE_CHECK(!allocated_, "parameter '", name, "' registered after allocate()");
  MOE_CHECK(find(name) == nullptr, "parameter '", name, "' registered twice");
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->kind = kind;
  p->weight_decay = weight_decay;
  p->matmul = matmul;
  p->shape = shape;
  params_.push_back(std::move(p));
  return *params_.back();
}

Parameter& ParameterSet::add_expert(const std::string& name, Shape local_shape,
                                    int64_t global_experts, int64_t first_expert, bool weight_decay,
                                    bool matmul) {
  Parameter& p = add(name, local_shape, ParamKind::kExpert, weight_decay, matmul);
  p.global_experts = global_experts;
  p.first_expert = first_expert;
  return p;
}

Status ParameterSet::allocate() {
  MOE_CHECK(!allocated_, "ParameterSet::allocate() called twice");
  const DType f = master_dtype();
  int64_t working = 0;
  for (const auto& p : params_) working += has_working(*p) ? working_span(p->numel()) : 0;
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    const int64_t n = numel(kind);
    MOE_ASSIGN_OR_RETURN(masters_[index(kind)], ctx_->zeros({n}, f));
    MOE_ASSIGN_OR_RETURN(grads_[index(kind)], ctx_->zeros({n}, f));
  }
  MOE_ASSIGN_OR_RETURN(working_, ctx_->zeros({working}, act_));
  int64_t offset[2] = {0, 0}, working_offset = 0;
  for (const auto& p : params_) {
    const int i = index(p->kind);
    const int64_t n = p->numel();
    p->arena_offset = offset[i];
    p->master = p->slice_of(masters_[i]);
    p->grad = p->slice_of(grads_[i]);
    offset[i] += n;
    if (has_working(*p)) {
      p->value = working_.view().rows(working_offset, working_offset + n).reshape(p->shape);
      working_offset += working_span(n);
    } else {
      p->value = p->master;
    }
  }
  allocated_ = true;
  return Status::OK();
}

Status ParameterSet::pad_arenas(ParamKind kind, int64_t multiple) {
  MOE_CHECK(allocated_, "pad_arenas() before allocate()");
  MOE_CHECK(!masters_sharded(kind), "pad_arenas() after shard_masters()");
  MOE_CHECK(multiple >= 1, "pad_arenas: multiple ", multiple, " must be >= 1");
  const int i = index(kind);
  const int64_t n = numel(kind);
  const int64_t padded = (n + multiple - 1) / multiple * multiple;
  if (padded == masters_[i].numel()) return Status::OK();
  // The gradients (zeros: nothing to keep) are freed first, so that the old and new masters and
  // the old gradients never coexist (a set-up peak above the steady state).
  grads_[i] = Tensor();
  MOE_ASSIGN_OR_RETURN(Tensor masters, ctx_->zeros({padded}, master_dtype()));
  MOE_RETURN_IF_ERROR(ctx_->copy(masters_[i].view().rows(0, n), masters.view().rows(0, n)));
  masters_[i] = Tensor();
  MOE_ASSIGN_OR_RETURN(grads_[i], ctx_->zeros({padded}, master_dtype()));
  masters_[i] = std::move(masters);
  for (const auto& p : params_) {
    if (p->kind != kind) continue;
    p->master = p->slice_of(masters_[i]);
    p->grad = p->slice_of(grads_[i]);
    if (!has_working(*p)) p->value = p->master;
  }
  return Status::OK();
}

Status ParameterSet::shard_masters(ParamKind kind, int64_t begin, int64_t chunk) {
  MOE_CHECK(allocated_, "shard_masters() before allocate()");
  MOE_CHECK(act_ != master_dtype(), "shard_masters(): every value is its master");
  const int i = index(kind);
  MOE_CHECK(
      !masters_sharded(kind) && begin >= 0 && chunk >= 1 && begin + chunk <= masters_[i].numel(),
      "shard_masters: chunk [", begin, ", ", begin + chunk, ") of ", masters_[i].numel());
  int64_t own = 0;  // the F values' elements
  for (const auto& p : params_) own += p->kind == kind && !has_working(*p) ? p->numel() : 0;
  MOE_ASSIGN_OR_RETURN(values_[i], ctx_->empty({own}, master_dtype()));
  MOE_ASSIGN_OR_RETURN(Tensor mine, ctx_->empty({chunk}, master_dtype()));
  MOE_RETURN_IF_ERROR(ctx_->copy(masters_[i].view().rows(begin, begin + chunk), mine));
  int64_t offset = 0;
  for (const auto& p : params_) {
    if (p->kind != kind) continue;
    if (!has_working(*p)) {
      p->value = values_[i].view().rows(offset, offset + p->numel()).reshape(p->shape);
      offset += p->numel();
      MOE_RETURN_IF_ERROR(ctx_->copy(p->master, p->value));
    }
    p->master = TensorView();
  }
  masters_[i] = std::move(mine);
  masters_begin_[i] = begin;
  return Status::OK();
}

Parameter* ParameterSet::find(const std::string& name) {
  for (auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->numel();
  return n;
}

int64_t ParameterSet::numel(ParamKind kind) const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->kind == kind ? p->numel() : 0;
  return n;
}

Status ParameterSet::zero_grads() {
  MOE_CHECK(allocated_, "zero_grads() before allocate()");
  for (const Tensor& g : grads_) MOE_RETURN_IF_ERROR(ctx_->zero(g));
  return Status::OK();
}

Status ParameterSet::refresh_working() {
  MOE_CHECK(allocated_, "refresh_working() before allocate()");
  for (const auto& p : params_) {
    if (has_working(*p) && !masters_sharded(p->kind)) {
      MOE_RETURN_IF_ERROR(kernels::convert(*ctx_, p->master, p->value));
    }
  }
  return Status::OK();
}

Status ParameterSet::refresh_values(ParamKind kind, const TensorView& whole) {
  MOE_CHECK(masters_sharded(kind), "refresh_values(): the masters are whole (refresh_working)");
  MOE_CHECK(whole.numel() >= numel(kind) && whole.dtype() == master_dtype(),
            "refresh_values: ", whole.to_string(), " for ", numel(kind), " parameters");
  for (const auto& p : params_) {
    if (p->kind != kind) continue;
    const TensorView master = p->slice_of(whole);
    if (has_working(*p)) {
      MOE_RETURN_IF_ERROR(kernels::convert(*ctx_, master, p->value));
    } else {
      MOE_RETURN_IF_ERROR(ctx_->copy(master, p->value));
    }
  }
  return Status::OK();
}

Status ParameterSet::store_value(const Parameter& p) {
  if (!masters_sharded(p.kind)) return Status::OK();
  MOE_CHECK(!has_working(p), "store_value: '", p.name, "' computes with a working copy");
  const int i = index(p.kind);
  const int64_t begin = masters_begin_[i], end = begin + masters_[i].numel();
  const int64_t lo = std::max(p.arena_offset, begin);
  const int64_t hi = std::min(p.arena_offset + p.numel(), end);
  if (lo >= hi) return Status::OK();
  const TensorView flat = p.value.reshape(Shape{p.numel()});
  return ctx_->copy(flat.rows(lo - p.arena_offset, hi - p.arena_offset),
                    masters_[i].view().rows(lo - begin, hi - begin));
}

int64_t held_bytes(const Tensor& t) {
  if (t.nbytes() == 0 || !t.view().is_host()) return static_cast<int64_t>(t.nbytes());
  return static_cast<int64_t>(allocator_bucket_size(t.nbytes()));
}

int64_t ParameterSet::parameter_bytes() const {
  int64_t bytes = held_bytes(working_);
  for (int i = 0; i < 2; ++i) bytes += held_bytes(masters_[i]) + held_bytes(values_[i]);
  return bytes;
}

}  // namespace moe
