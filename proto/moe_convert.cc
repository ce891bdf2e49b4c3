#include "proto/moe_convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <string>
#include <vector>

#include "base/check.h"
#include "base/did_you_mean.h"
#include "proto/moe_convert_pb.h"

namespace moe {
namespace proto_internal {
namespace {

// Collects text-format errors with their positions instead of logging them.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = str_cat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// For protobuf's `Message type "momoe.TrainConfig" has no field named "stepz".`: the closest
// fields of that message (" (did you mean steps?)"), else "".
std::string suggest_field(const std::string& error, const google::protobuf::Message& msg) {
  const std::string type_mark = "Message type \"", field_mark = "\" has no field named \"";
  const size_t type_at = error.find(type_mark);
  const size_t field_at = error.find(field_mark);
  if (type_at == std::string::npos || field_at == std::string::npos || field_at < type_at)
    return "";
  const std::string type =
      error.substr(type_at + type_mark.size(), field_at - type_at - type_mark.size());
  const size_t name_at = field_at + field_mark.size();
  const std::string name = error.substr(name_at, error.find('"', name_at) - name_at);
  const google::protobuf::Descriptor* d =
      msg.GetDescriptor()->file()->pool()->FindMessageTypeByName(type);
  if (d == nullptr) return "";
  std::vector<std::string> fields;
  for (int i = 0; i < d->field_count(); ++i) fields.push_back(d->field(i)->name());
  return did_you_mean(name, fields);
}

// The value names of the enum fields named `field` in `d` and the messages below it (each once).
void enum_values_of(const google::protobuf::Descriptor* d, const std::string& field,
                    std::vector<const google::protobuf::Descriptor*>* seen,
                    std::vector<std::string>* values) {
  for (const google::protobuf::Descriptor* s : *seen) {
    if (s == d) return;
  }
  seen->push_back(d);
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->message_type() != nullptr) enum_values_of(f->message_type(), field, seen, values);
    if (f->enum_type() == nullptr || f->name() != field) continue;
    for (int v = 0; v < f->enum_type()->value_count(); ++v) {
      values->push_back(f->enum_type()->value(v)->name());
    }
  }
}

// For protobuf's `Unknown enumeration value of "ADAMX" for field "kind".`: the closest value of
// the enum fields of that name in the config (" (did you mean ADAMW?)"), else "".
std::string suggest_enum_value(const std::string& error, const google::protobuf::Message& msg) {
  const std::string value_mark = "Unknown enumeration value of \"", field_mark = "\" for field \"";
  const size_t value_at = error.find(value_mark);
  const size_t field_at = error.find(field_mark);
  if (value_at == std::string::npos || field_at == std::string::npos || field_at < value_at)
    return "";
  const std::string value =
      error.substr(value_at + value_mark.size(), field_at - value_at - value_mark.size());
  const size_t name_at = field_at + field_mark.size();
  const std::string field = error.substr(name_at, error.find('"', name_at) - name_at);
  std::vector<const google::protobuf::Descriptor*> seen;
  std::vector<std::string> values;
  enum_values_of(msg.GetDescriptor(), field, &seen, &values);
  return did_you_mean(value, values);
}

}  // namespace

Status parse_text_proto(const std::string& text, const std::string& where,
                        google::protobuf::Message* msg) {
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, msg)) {
    return invalid_argument_error(
        where, ": ", errors.first().empty() ? "cannot parse" : errors.first(),
        suggest_field(errors.first(), *msg), suggest_enum_value(errors.first(), *msg));
  }
  return Status::OK();
}

// function-length: table (one line per field)
Status apply_moe_proto(const momoe::MoeConfig& m, const std::string& where, MoeLayerConfig* c) {
  if (m.has_d_model()) c->d_model = m.d_model();
  if (m.has_d_expert()) c->d_expert = m.d_expert();
  if (m.has_num_experts()) c->num_experts = m.num_experts();
  if (m.has_top_k()) c->top_k = m.top_k();
  if (m.has_capacity_factor()) c->capacity_factor = m.capacity_factor();
  if (m.has_dropless()) c->dropless = m.dropless();
  if (m.has_eval_capacity_factor()) c->eval_capacity_factor = m.eval_capacity_factor();
  if (m.score_function() == momoe::MoeConfig::SIGMOID) c->score_function = ScoreFunction::kSigmoid;
  if (m.score_function() == momoe::MoeConfig::SOFTMAX) c->score_function = ScoreFunction::kSoftmax;
  if (m.has_renormalize()) c->renormalize = m.renormalize();
  if (m.has_routed_scaling()) c->routed_scaling = m.routed_scaling();
  if (m.has_seq_balance_loss_coef()) c->seq_balance_loss_coef = m.seq_balance_loss_coef();
  if (m.has_bias_update_rate()) c->bias_update_rate = m.bias_update_rate();
  if (m.has_shared_experts()) c->shared_experts = m.shared_experts();
  if (m.has_d_shared()) c->d_shared = m.d_shared();
  if (m.has_shared_expert_gate()) c->shared_expert_gate = m.shared_expert_gate();
  if (m.has_expert_groups()) c->expert_groups = m.expert_groups();
  if (m.has_topk_groups()) c->topk_groups = m.topk_groups();
  if (m.has_max_ep_ranks()) c->max_ep_ranks = m.max_ep_ranks();
  switch (m.activation()) {
    case momoe::ACTIVATION_UNSPECIFIED:
      break;
    case momoe::RELU:
      c->activation = ExpertActivation::kRelu;
      break;
    case momoe::GELU:
      c->activation = ExpertActivation::kGelu;
      break;
    case momoe::GELU_TANH:
      c->activation = ExpertActivation::kGeluTanh;
      break;
    case momoe::SWIGLU:
      c->activation = ExpertActivation::kSwiglu;
      break;
    default:
      return invalid_argument_error(where, ".activation: unknown value ", m.activation());
  }
  if (m.has_expert_dropout()) c->expert_dropout = m.expert_dropout();
  if (m.has_output_dropout()) c->output_dropout = m.output_dropout();
  if (m.has_balance_loss_coef()) c->balance_loss_coef = m.balance_loss_coef();
  if (m.has_z_loss_coef()) c->z_loss_coef = m.z_loss_coef();
  switch (m.balance_scope()) {
    case momoe::MoeConfig::BALANCE_SCOPE_UNSPECIFIED:
      break;
    case momoe::MoeConfig::LOCAL:
      c->balance_scope = BalanceScope::kLocal;
      break;
    case momoe::MoeConfig::GLOBAL:
      c->balance_scope = BalanceScope::kGlobal;
      break;
    default:
      return invalid_argument_error(where, ".balance_scope: unknown value");
  }
  switch (m.residual()) {
    case momoe::MoeConfig::RESIDUAL_UNSPECIFIED:
      break;
    case momoe::MoeConfig::PLAIN:
      c->residual = ResidualKind::kPlain;
      break;
    case momoe::MoeConfig::HEAVY_BALL:
      c->residual = ResidualKind::kHeavyBall;
      break;
    case momoe::MoeConfig::ADAM:
      c->residual = ResidualKind::kAdam;
      break;
    case momoe::MoeConfig::ROBUST:
      c->residual = ResidualKind::kRobust;
      break;
    default:
      return invalid_argument_error(where, ".residual: unknown value ", m.residual());
  }
  switch (m.convention()) {
    case momoe::MoeConfig::CONVENTION_UNSPECIFIED:
      break;
    case momoe::MoeConfig::PAPER:
      c->convention = MomentumConvention::kPaper;
      break;
    case momoe::MoeConfig::REFERENCE_CODE:
      c->convention = MomentumConvention::kReferenceCode;
      break;
    default:
      return invalid_argument_error(where, ".convention: unknown value ", m.convention());
  }
  if (m.has_heavy_ball()) {
    if (m.heavy_ball().has_mu()) c->heavy_ball.mu = m.heavy_ball().mu();
    if (m.heavy_ball().has_gamma()) c->heavy_ball.gamma = m.heavy_ball().gamma();
  }
  if (m.has_adam()) {
    const momoe::AdamConfig& a = m.adam();
    if (a.has_reference_code() && a.reference_code()) {
      c->adam.eps_placement = AdamEpsPlacement::kInsideSqrt;
      c->adam.kappa = 1.0;
    }
    if (a.has_beta1()) c->adam.beta1 = a.beta1();
    if (a.has_beta2()) c->adam.beta2 = a.beta2();
    if (a.has_eps()) c->adam.eps = a.eps();
    switch (a.eps_placement()) {
      case momoe::AdamConfig::EPS_PLACEMENT_UNSPECIFIED:
        break;
      case momoe::AdamConfig::OUTSIDE_SQRT:
        c->adam.eps_placement = AdamEpsPlacement::kOutsideSqrt;
        break;
      case momoe::AdamConfig::INSIDE_SQRT:
        c->adam.eps_placement = AdamEpsPlacement::kInsideSqrt;
        break;
      default:
        return invalid_argument_error(where, ".adam.eps_placement: unknown value");
    }
    if (a.has_kappa()) c->adam.kappa = a.kappa();
    if (a.has_gamma()) c->adam.gamma = a.gamma();
  }
  if (m.has_robust()) {
    if (m.robust().has_rho()) c->robust.rho = m.robust().rho();
    if (m.robust().has_lipschitz()) c->robust.lipschitz = m.robust().lipschitz();
    if (m.robust().has_strong_convexity())
      c->robust.strong_convexity = m.robust().strong_convexity();
  }
  if (m.has_ac()) {
    const momoe::AcRouterConfig& a = m.ac();
    if (a.has_enabled()) c->ac.enabled = a.enabled();
    switch (a.normalization()) {
      case momoe::AcRouterConfig::NORMALIZATION_UNSPECIFIED:
        break;
      case momoe::AcRouterConfig::PAPER:
        c->ac.normalization = AcNormalization::kPaper;
        break;
      case momoe::AcRouterConfig::REFERENCE_CODE:
        c->ac.normalization = AcNormalization::kReferenceCode;
        break;
      default:
        return invalid_argument_error(where, ".ac.normalization: unknown value");
    }
    if (a.has_eps()) c->ac.eps = a.eps();
    if (a.has_clip_mult()) c->ac.clip_mult = a.clip_mult();
    if (a.has_min_cluster_size()) c->ac.min_cluster_size = a.min_cluster_size();
    if (a.has_global_stats()) c->ac.global_stats = a.global_stats();
    switch (a.logits()) {
      case momoe::AcRouterConfig::LOGITS_UNSPECIFIED:
        break;
      case momoe::AcRouterConfig::LINEAR:
        c->ac.logits = AcLogits::kLinear;
        break;
      case momoe::AcRouterConfig::UNIT_NORM_EMBEDDINGS:
        c->ac.logits = AcLogits::kUnitNormEmbeddings;
        break;
      default:
        return invalid_argument_error(where, ".ac.logits: unknown value");
    }
  }
  if (m.has_sparsemixer()) {
    const momoe::SparseMixerConfig& s = m.sparsemixer();
    if (s.has_enabled()) c->sparsemixer.enabled = s.enabled();
    if (s.has_jitter()) c->sparsemixer.jitter = s.jitter();
    switch (s.mask()) {
      case momoe::SparseMixerConfig::MASK_UNSPECIFIED:
        break;
      case momoe::SparseMixerConfig::MASK_PAPER:
        c->sparsemixer.mask = SparseMixerMask::kPaper;
        break;
      case momoe::SparseMixerConfig::MASK_REFERENCE_CODE:
        c->sparsemixer.mask = SparseMixerMask::kReferenceCode;
        break;
      default:
        return invalid_argument_error(where, ".sparsemixer.mask: unknown value");
    }
    switch (s.midpoint()) {
      case momoe::SparseMixerConfig::MIDPOINT_UNSPECIFIED:
        break;
      case momoe::SparseMixerConfig::MIDPOINT_PAPER:
        c->sparsemixer.midpoint = SparseMixerMidpoint::kPaper;
        break;
      case momoe::SparseMixerConfig::MIDPOINT_REFERENCE_CODE:
        c->sparsemixer.midpoint = SparseMixerMidpoint::kReferenceCode;
        break;
      case momoe::SparseMixerConfig::MIDPOINT_EULER_ONLY:
        c->sparsemixer.midpoint = SparseMixerMidpoint::kEulerOnly;
        break;
      default:
        return invalid_argument_error(where, ".sparsemixer.midpoint: unknown value");
    }
    switch (s.gate_grad()) {
      case momoe::SparseMixerConfig::GATE_GRAD_UNSPECIFIED:
        break;
      case momoe::SparseMixerConfig::GATE_GRAD_REFERENCE_CODE:
        c->sparsemixer.gate_grad = SparseMixerGateGrad::kReferenceCode;
        break;
      case momoe::SparseMixerConfig::GATE_GRAD_PAPER:
        c->sparsemixer.gate_grad = SparseMixerGateGrad::kPaper;
        break;
      default:
        return invalid_argument_error(where, ".sparsemixer.gate_grad: unknown value");
    }
    if (s.has_omega()) c->sparsemixer.omega = s.omega();
  }
  return Status::OK();
}

// function-length: table (one line per field)
void moe_config_to_proto(const MoeLayerConfig& c, momoe::MoeConfig* m) {
  m->set_d_model(c.d_model);
  m->set_d_expert(c.d_expert);
  m->set_num_experts(c.num_experts);
  m->set_top_k(c.top_k);
  m->set_capacity_factor(c.capacity_factor);
  m->set_dropless(c.dropless);
  m->set_eval_capacity_factor(c.eval_capacity_factor);
  m->set_score_function(c.score_function == ScoreFunction::kSigmoid ? momoe::MoeConfig::SIGMOID
                                                                    : momoe::MoeConfig::SOFTMAX);
  m->set_renormalize(c.renormalize);
  m->set_routed_scaling(c.routed_scaling);
  m->set_seq_balance_loss_coef(c.seq_balance_loss_coef);
  m->set_bias_update_rate(c.bias_update_rate);
  m->set_shared_experts(c.shared_experts);
  m->set_d_shared(c.d_shared);
  m->set_shared_expert_gate(c.shared_expert_gate);
  m->set_expert_groups(c.expert_groups);
  m->set_topk_groups(c.topk_groups);
  m->set_max_ep_ranks(c.max_ep_ranks);
  m->set_activation(c.activation == ExpertActivation::kRelu       ? momoe::RELU
                    : c.activation == ExpertActivation::kGelu     ? momoe::GELU
                    : c.activation == ExpertActivation::kGeluTanh ? momoe::GELU_TANH
                                                                  : momoe::SWIGLU);
  m->set_expert_dropout(c.expert_dropout);
  m->set_output_dropout(c.output_dropout);
  m->set_balance_loss_coef(c.balance_loss_coef);
  m->set_z_loss_coef(c.z_loss_coef);
  m->set_balance_scope(c.balance_scope == BalanceScope::kLocal ? momoe::MoeConfig::LOCAL
                                                               : momoe::MoeConfig::GLOBAL);
  switch (c.residual) {
    case ResidualKind::kPlain:
      m->set_residual(momoe::MoeConfig::PLAIN);
      break;
    case ResidualKind::kHeavyBall:
      m->set_residual(momoe::MoeConfig::HEAVY_BALL);
      break;
    case ResidualKind::kAdam:
      m->set_residual(momoe::MoeConfig::ADAM);
      break;
    case ResidualKind::kRobust:
      m->set_residual(momoe::MoeConfig::ROBUST);
      break;
  }
  m->set_convention(c.convention == MomentumConvention::kPaper ? momoe::MoeConfig::PAPER
                                                               : momoe::MoeConfig::REFERENCE_CODE);
  m->mutable_heavy_ball()->set_mu(c.heavy_ball.mu);
  m->mutable_heavy_ball()->set_gamma(c.heavy_ball.gamma);
  momoe::AdamConfig* a = m->mutable_adam();
  a->set_reference_code(false);  // the fields below say it all
  a->set_beta1(c.adam.beta1);
  a->set_beta2(c.adam.beta2);
  a->set_eps(c.adam.eps);
  a->set_eps_placement(c.adam.eps_placement == AdamEpsPlacement::kOutsideSqrt
                           ? momoe::AdamConfig::OUTSIDE_SQRT
                           : momoe::AdamConfig::INSIDE_SQRT);
  a->set_kappa(c.adam.kappa);
  a->set_gamma(c.adam.gamma);
  m->mutable_robust()->set_rho(c.robust.rho);
  m->mutable_robust()->set_lipschitz(c.robust.lipschitz);
  m->mutable_robust()->set_strong_convexity(c.robust.strong_convexity);
  momoe::AcRouterConfig* ac = m->mutable_ac();
  ac->set_enabled(c.ac.enabled);
  ac->set_normalization(c.ac.normalization == AcNormalization::kPaper
                            ? momoe::AcRouterConfig::PAPER
                            : momoe::AcRouterConfig::REFERENCE_CODE);
  ac->set_eps(c.ac.eps);
  ac->set_clip_mult(c.ac.clip_mult);
  ac->set_min_cluster_size(c.ac.min_cluster_size);
  ac->set_global_stats(c.ac.global_stats);
  ac->set_logits(c.ac.logits == AcLogits::kLinear ? momoe::AcRouterConfig::LINEAR
                                                  : momoe::AcRouterConfig::UNIT_NORM_EMBEDDINGS);
  momoe::SparseMixerConfig* s = m->mutable_sparsemixer();
  s->set_enabled(c.sparsemixer.enabled);
  s->set_jitter(c.sparsemixer.jitter);
  s->set_mask(c.sparsemixer.mask == SparseMixerMask::kPaper
                  ? momoe::SparseMixerConfig::MASK_PAPER
                  : momoe::SparseMixerConfig::MASK_REFERENCE_CODE);
  s->set_midpoint(c.sparsemixer.midpoint == SparseMixerMidpoint::kPaper
                      ? momoe::SparseMixerConfig::MIDPOINT_PAPER
                  : c.sparsemixer.midpoint == SparseMixerMidpoint::kReferenceCode
                      ? momoe::SparseMixerConfig::MIDPOINT_REFERENCE_CODE
                      : momoe::SparseMixerConfig::MIDPOINT_EULER_ONLY);
  s->set_gate_grad(c.sparsemixer.gate_grad == SparseMixerGateGrad::kReferenceCode
                       ? momoe::SparseMixerConfig::GATE_GRAD_REFERENCE_CODE
                       : momoe::SparseMixerConfig::GATE_GRAD_PAPER);
  s->set_omega(c.sparsemixer.omega);
}

namespace {

// One singular field's value as protobuf text (exact for doubles: TextFormat round-trips them).
std::string field_text(const google::protobuf::Message& m,
                       const google::protobuf::FieldDescriptor* f) {
  std::string out;
  google::protobuf::TextFormat::PrintFieldValueToString(m, f, -1, &out);
  return out;
}

}  // namespace

void strip_inherited(const google::protobuf::Message& base, google::protobuf::Message* block) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* rb = base.GetReflection();
  const google::protobuf::Reflection* r = block->GetReflection();
  const google::protobuf::Descriptor* d = block->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    MOE_CHECK(!f->is_repeated(), "strip_inherited: repeated field ", f->full_name());
    if (!r->HasField(*block, f)) continue;  // absent (or an implicit-presence default)
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!rb->HasField(base, f)) continue;
      google::protobuf::Message* sub = r->MutableMessage(block, f);
      strip_inherited(rb->GetMessage(base, f), sub);
      if (sub->ByteSizeLong() == 0) r->ClearField(block, f);
      continue;
    }
    // Equal values: the block inherits it (an implicit-presence enum cleared is UNSPECIFIED,
    // which inherits too).
    const bool base_has = rb->HasField(base, f) || !f->has_presence();
    if (base_has && field_text(*block, f) == field_text(base, f)) r->ClearField(block, f);
  }
}

}  // namespace proto_internal

StatusOr<MoeLayerConfig> parse_moe_config_text(const std::string& text, const std::string& where,
                                               int ep_size) {
  momoe::MoeConfig msg;
  MOE_RETURN_IF_ERROR(proto_internal::parse_text_proto(text, where, &msg));
  MoeLayerConfig cfg;
  MOE_RETURN_IF_ERROR(proto_internal::apply_moe_proto(msg, where, &cfg));
  MOE_RETURN_IF_ERROR(cfg.validate(where, ep_size));
  return cfg;
}

std::string moe_config_to_text(const MoeLayerConfig& cfg) {
  momoe::MoeConfig msg;
  proto_internal::moe_config_to_proto(cfg, &msg);
  std::string text;
  google::protobuf::TextFormat::PrintToString(msg, &text);
  return text;
}

}  // namespace moe
