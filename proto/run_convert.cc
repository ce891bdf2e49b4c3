#include "proto/run_convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cctype>
#include <cmath>
#include <optional>
#include <regex>
#include <utility>

#include "base/check.h"
#include "base/did_you_mean.h"
#include "io/file_util.h"
#include "proto/moe_convert_pb.h"
#include "proto/train.pb.h"

namespace moe {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

class QuietErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, int, const std::string&) override {}
};

// Every float and double field set anywhere in `msg` is finite: inf and nan pass range checks
// written as !(x >= 0) and would reach training (weight_decay = inf trains NaN weights).
Status check_finite(const Message& msg, const std::string& prefix) {
  const google::protobuf::Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    const int n = f->is_repeated() ? r->FieldSize(msg, f) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at = f->is_repeated() ? str_cat(path, "[", i, "]") : path;
      double v = 0;
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_DOUBLE:
          v = f->is_repeated() ? r->GetRepeatedDouble(msg, f, i) : r->GetDouble(msg, f);
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          v = f->is_repeated() ? r->GetRepeatedFloat(msg, f, i) : r->GetFloat(msg, f);
          break;
        case FieldDescriptor::CPPTYPE_MESSAGE:
          MOE_RETURN_IF_ERROR(check_finite(
              f->is_repeated() ? r->GetRepeatedMessage(msg, f, i) : r->GetMessage(msg, f), at));
          continue;
        default:
          continue;
      }
      if (!std::isfinite(v)) {
        return invalid_argument_error(at, " = ", v, " is not a finite number");
      }
    }
  }
  return Status::OK();
}

// For an enum field: " (one of ADAMW, SGD; did you mean ADAMW?)" (the suggestion when `value` is
// close to one); "" for other fields.
std::string enum_choices(const FieldDescriptor* field, const std::string& value) {
  const google::protobuf::EnumDescriptor* e = field->enum_type();
  if (e == nullptr) return "";
  std::vector<std::string> names;
  std::string list;
  for (int v = 0; v < e->value_count(); ++v) {
    names.push_back(e->value(v)->name());
    if (e->value(v)->number() == 0) continue;  // the _UNSPECIFIED default is not a choice
    list += (list.empty() ? "" : ", ") + e->value(v)->name();
  }
  std::string close = did_you_mean(value, names);  // " (did you mean X?)"
  if (!close.empty()) close = "; " + close.substr(2, close.size() - 3);
  return str_cat(" (one of ", list, close, ")");
}

// Sets one field addressed by a dotted path from its text-format value.
Status apply_override(const std::string& assignment, Message* root) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return invalid_argument_error("--set '", assignment, "': expected field.path=value");
  }
  const std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  Message* msg = root;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string name =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const FieldDescriptor* field = msg->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr) {
      std::vector<std::string> fields;
      const google::protobuf::Descriptor* d = msg->GetDescriptor();
      for (int i = 0; i < d->field_count(); ++i) fields.push_back(d->field(i)->name());
      return invalid_argument_error("--set '", assignment, "': ", d->full_name(), " has no field '",
                                    name, "'", did_you_mean(name, fields, path.substr(0, start)));
    }
    if (field->is_repeated()) {
      return invalid_argument_error("--set '", assignment, "': '", name,
                                    "' is a repeated field; edit the config file instead");
    }
    if (dot == std::string::npos) {
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        return invalid_argument_error("--set '", assignment, "': '", name,
                                      "' is a message; set one of its fields");
      }
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
          (value.empty() || value[0] != '"')) {
        value = "\"" + value + "\"";
      }
      google::protobuf::TextFormat::Parser parser;
      QuietErrors quiet;
      parser.RecordErrorsTo(&quiet);
      if (!parser.ParseFieldValueFromString(value, field, msg)) {
        return invalid_argument_error("--set '", assignment, "': '", assignment.substr(eq + 1),
                                      "' is not a valid value for ", field->full_name(),
                                      enum_choices(field, assignment.substr(eq + 1)));
      }
      return Status::OK();
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return invalid_argument_error("--set '", assignment, "': '", name, "' is not a message");
    }
    msg = msg->GetReflection()->MutableMessage(msg, field);
    start = dot + 1;
  }
}

ExpertActivation activation_of(momoe::Activation a, ExpertActivation fallback) {
  switch (a) {
    case momoe::RELU:
      return ExpertActivation::kRelu;
    case momoe::GELU:
      return ExpertActivation::kGelu;
    case momoe::GELU_TANH:
      return ExpertActivation::kGeluTanh;
    case momoe::SWIGLU:
      return ExpertActivation::kSwiglu;
    default:
      return fallback;
  }
}

Status convert_model(const momoe::ModelConfig& m, ModelConfig* c) {
  if (m.has_vocab_size()) c->vocab_size = m.vocab_size();
  if (m.has_d_model()) c->d_model = m.d_model();
  if (m.has_n_heads()) c->n_heads = m.n_heads();
  if (m.has_seq_len()) c->seq_len = m.seq_len();
  c->d_ff = m.has_d_ff() ? m.d_ff() : 2 * c->d_model;
  c->activation = activation_of(m.activation(), ExpertActivation::kRelu);
  if (m.has_dropout()) c->dropout = m.dropout();
  if (m.has_attention_dropout()) c->attention_dropout = m.attention_dropout();
  if (m.has_tie_embeddings()) c->tie_embeddings = m.tie_embeddings();
  if (m.block_style() == momoe::ModelConfig::PRE_LN) c->block_style = BlockStyle::kPreLn;
  if (m.has_init_std()) c->init_std = m.init_std();
  if (m.norm() == momoe::ModelConfig::RMS_NORM) c->norm = NormKind::kRmsNorm;
  if (m.has_norm_eps()) c->norm_eps = m.norm_eps();
  if (m.position() == momoe::ModelConfig::ROPE) c->position = PositionKind::kRope;
  if (m.has_rope_base()) c->rope_base = m.rope_base();
  if (m.has_linear_bias()) c->linear_bias = m.linear_bias();
  if (m.has_qk_norm()) c->qk_norm = m.qk_norm();

  // MoE defaults: width from the model, expert hidden width = d_model (the reference code's LM
  // experts), dropouts from the model's dropout.
  MoeLayerConfig moe_default;
  moe_default.d_model = c->d_model;
  moe_default.d_expert = c->d_model;
  moe_default.expert_dropout = c->dropout;
  moe_default.output_dropout = c->dropout;
  moe_default.linear_bias = c->linear_bias;
  MOE_RETURN_IF_ERROR(proto_internal::apply_moe_proto(m.moe(), "model.moe", &moe_default));
  if (moe_default.d_model != c->d_model) {
    return invalid_argument_error("model.moe.d_model = ", moe_default.d_model,
                                  " must equal model.d_model = ", c->d_model, " (or be left out)");
  }

  if (m.has_arch() && m.blocks_size() > 0) {
    return invalid_argument_error("model: set either arch or blocks, not both");
  }
  if (m.has_arch()) {
    c->arch = m.arch();
    MOE_ASSIGN_OR_RETURN(c->blocks, expand_arch_string(m.arch(), moe_default));
  } else if (m.blocks_size() > 0) {
    c->blocks.clear();
    for (int b = 0; b < m.blocks_size(); ++b) {
      const momoe::BlockConfig& blk = m.blocks(b);
      const std::string where = str_cat("model.blocks[", b, "]");
      if (blk.kind() == momoe::BlockConfig::KIND_UNSPECIFIED) {
        return invalid_argument_error(where, ".kind must be MOE or DENSE");
      }
      BlockPlan plan;
      plan.moe = blk.kind() == momoe::BlockConfig::MOE;
      plan.moe_cfg = moe_default;
      MOE_RETURN_IF_ERROR(
          proto_internal::apply_moe_proto(blk.moe(), where + ".moe", &plan.moe_cfg));
      c->blocks.push_back(plan);
    }
  } else {
    return invalid_argument_error("model: no blocks; set arch (e.g. \"sgsmsm\") or blocks");
  }
  return Status::OK();
}

// train.recompute; a number outside the enum (the text format accepts one) is refused.
StatusOr<Recompute> recompute_from_proto(int mode) {
  switch (mode) {
    case momoe::Recompute::MODE_UNSPECIFIED:
    case momoe::Recompute::NONE:
      return Recompute::kNone;
    case momoe::Recompute::SELECTIVE:
      return Recompute::kSelective;
    case momoe::Recompute::FULL:
      return Recompute::kFull;
    default:
      return invalid_argument_error("train.recompute = ", mode,
                                    " is not a recompute setting (one of NONE, SELECTIVE, FULL)");
  }
}

momoe::Recompute::Mode recompute_to_proto(Recompute r) {
  switch (r) {
    case Recompute::kSelective:
      return momoe::Recompute::SELECTIVE;
    case Recompute::kFull:
      return momoe::Recompute::FULL;
    case Recompute::kNone:
      break;
  }
  return momoe::Recompute::NONE;
}

Status convert_train(const momoe::TrainConfig& t, TrainConfig* c) {
  if (t.has_steps()) c->steps = t.steps();
  if (t.has_batch_size()) c->batch_size = t.batch_size();
  if (t.has_grad_accum()) c->grad_accum = t.grad_accum();
  const momoe::OptimizerConfig& o = t.optimizer();
  if (o.kind() == momoe::OptimizerConfig::SGD) c->optimizer.kind = OptimizerKind::kSgd;
  if (o.has_lr()) c->optimizer.lr = o.lr();
  if (o.has_beta1()) c->optimizer.beta1 = o.beta1();
  if (o.has_beta2()) c->optimizer.beta2 = o.beta2();
  if (o.has_eps()) c->optimizer.eps = o.eps();
  if (o.has_weight_decay()) c->optimizer.weight_decay = o.weight_decay();
  if (o.has_momentum()) c->optimizer.momentum = o.momentum();
  if (t.schedule().kind() == momoe::ScheduleConfig::COSINE) c->schedule = LrScheduleKind::kCosine;
  if (t.schedule().has_warmup_steps()) c->warmup_steps = t.schedule().warmup_steps();
  if (t.schedule().has_min_lr_ratio()) c->min_lr_ratio = t.schedule().min_lr_ratio();
  if (t.has_grad_clip()) c->grad_clip = t.grad_clip();
  if (t.has_seed()) c->seed = t.seed();
  if (t.has_eval_every()) c->eval_every = t.eval_every();
  if (t.has_eval_sequences()) c->eval_sequences = t.eval_sequences();
  if (t.has_checkpoint_every()) c->checkpoint_every = t.checkpoint_every();
  if (t.has_keep_checkpoints()) c->keep_checkpoints = t.keep_checkpoints();
  if (t.has_checkpoint_minutes()) c->checkpoint_minutes = t.checkpoint_minutes();
  if (t.has_log_every()) c->log_every = t.log_every();
  if (t.has_attack_rate()) c->attack_rate = t.attack_rate();
  if (t.has_attack_seed()) c->attack_seed = t.attack_seed();
  if (t.has_probe_every()) c->probe_every = t.probe_every();
  if (t.has_probe_sequences()) c->probe_sequences = t.probe_sequences();
  if (t.has_collapse_threshold()) c->collapse_threshold = t.collapse_threshold();
  if (t.has_max_skipped_steps()) c->max_skipped_steps = t.max_skipped_steps();
  if (t.has_tensorboard()) c->tensorboard = t.tensorboard();
  if (t.has_distributed_optimizer()) c->distributed_optimizer = t.distributed_optimizer();
  if (t.has_loss_chunk_tokens()) c->loss_chunk_tokens = t.loss_chunk_tokens();
  if (t.has_cuda_graphs()) c->cuda_graphs = t.cuda_graphs();
  if (t.precision() == momoe::TrainConfig::BF16) c->precision = Precision::kBf16;
  if (t.device() == momoe::TrainConfig::CUDA) c->device = DeviceKind::kCuda;
  switch (t.final_eval()) {
    case momoe::TrainConfig::SUBSET:
      c->final_eval = FinalEval::kSubset;
      break;
    case momoe::TrainConfig::WHOLE:
      c->final_eval = FinalEval::kWhole;
      break;
    case momoe::TrainConfig::NONE:
      c->final_eval = FinalEval::kNone;
      break;
    default:
      c->final_eval = FinalEval::kBoth;
      break;
  }
  MOE_ASSIGN_OR_RETURN(c->recompute, recompute_from_proto(t.recompute()));
  return c->validate();
}

momoe::Activation activation_to_proto(ExpertActivation a) {
  switch (a) {
    case ExpertActivation::kRelu:
      return momoe::RELU;
    case ExpertActivation::kGelu:
      return momoe::GELU;
    case ExpertActivation::kGeluTanh:
      return momoe::GELU_TANH;
    case ExpertActivation::kSwiglu:
      return momoe::SWIGLU;
  }
  return momoe::RELU;
}

// Every field of the struct, explicitly (see resolved_config_text). The plan is written as
// explicit blocks; `arch` is left out (it is shorthand for the blocks), `model.moe` holds the
// first MoE block's full config and every MoE block only its fields that differ from it.
// function-length: table (one line per field)
void run_config_to_proto(const RunConfig& cfg, momoe::RunConfig* msg) {
  const ModelConfig& c = cfg.model;
  momoe::ModelConfig* m = msg->mutable_model();
  m->set_vocab_size(c.vocab_size);
  m->set_d_model(c.d_model);
  m->set_n_heads(c.n_heads);
  m->set_seq_len(c.seq_len);
  m->set_d_ff(c.d_ff);
  m->set_activation(activation_to_proto(c.activation));
  m->set_dropout(c.dropout);
  m->set_attention_dropout(c.attention_dropout);
  m->set_tie_embeddings(c.tie_embeddings);
  m->set_block_style(c.block_style == BlockStyle::kPreLn
                         ? momoe::ModelConfig::PRE_LN
                         : momoe::ModelConfig::POST_LN_DOUBLE_RESIDUAL);
  m->set_init_std(c.init_std);
  m->set_norm(c.norm == NormKind::kRmsNorm ? momoe::ModelConfig::RMS_NORM
                                           : momoe::ModelConfig::LAYER_NORM);
  m->set_norm_eps(c.norm_eps);
  m->set_position(c.position == PositionKind::kRope ? momoe::ModelConfig::ROPE
                                                    : momoe::ModelConfig::LEARNED);
  m->set_rope_base(c.rope_base);
  m->set_linear_bias(c.linear_bias);
  m->set_qk_norm(c.qk_norm);
  const BlockPlan* first_moe = nullptr;
  for (const BlockPlan& b : c.blocks) {
    momoe::BlockConfig* blk = m->add_blocks();
    blk->set_kind(b.moe ? momoe::BlockConfig::MOE : momoe::BlockConfig::DENSE);
    if (b.moe) {
      proto_internal::moe_config_to_proto(b.moe_cfg, blk->mutable_moe());
      if (first_moe == nullptr) first_moe = &b;
    }
  }
  MoeLayerConfig moe_default;
  moe_default.d_model = c.d_model;
  proto_internal::moe_config_to_proto(first_moe != nullptr ? first_moe->moe_cfg : moe_default,
                                      m->mutable_moe());
  // Each block keeps only what differs from model.moe, so that `--set model.moe.x=...` on a
  // printed config reaches every block, as it does on the config it was printed from.
  for (momoe::BlockConfig& blk : *m->mutable_blocks()) {
    if (!blk.has_moe()) continue;
    proto_internal::strip_inherited(m->moe(), blk.mutable_moe());
    if (blk.moe().ByteSizeLong() == 0) blk.clear_moe();
  }

  const TrainConfig& t = cfg.train;
  momoe::TrainConfig* tr = msg->mutable_train();
  tr->set_steps(t.steps);
  tr->set_batch_size(t.batch_size);
  tr->set_grad_accum(t.grad_accum);
  momoe::OptimizerConfig* o = tr->mutable_optimizer();
  o->set_kind(t.optimizer.kind == OptimizerKind::kSgd ? momoe::OptimizerConfig::SGD
                                                      : momoe::OptimizerConfig::ADAMW);
  o->set_lr(t.optimizer.lr);
  o->set_beta1(t.optimizer.beta1);
  o->set_beta2(t.optimizer.beta2);
  o->set_eps(t.optimizer.eps);
  o->set_weight_decay(t.optimizer.weight_decay);
  o->set_momentum(t.optimizer.momentum);
  momoe::ScheduleConfig* sc = tr->mutable_schedule();
  sc->set_kind(t.schedule == LrScheduleKind::kCosine ? momoe::ScheduleConfig::COSINE
                                                     : momoe::ScheduleConfig::CONSTANT);
  sc->set_warmup_steps(t.warmup_steps);
  sc->set_min_lr_ratio(t.min_lr_ratio);
  tr->set_grad_clip(t.grad_clip);
  tr->set_seed(t.seed);
  tr->set_eval_every(t.eval_every);
  tr->set_eval_sequences(t.eval_sequences);
  tr->set_checkpoint_every(t.checkpoint_every);
  tr->set_keep_checkpoints(t.keep_checkpoints);
  tr->set_checkpoint_minutes(t.checkpoint_minutes);
  tr->set_log_every(t.log_every);
  tr->set_attack_rate(t.attack_rate);
  tr->set_attack_seed(t.attack_seed);
  tr->set_probe_every(t.probe_every);
  tr->set_probe_sequences(t.probe_sequences);
  tr->set_collapse_threshold(t.collapse_threshold);
  tr->set_max_skipped_steps(t.max_skipped_steps);
  tr->set_final_eval(t.final_eval == FinalEval::kSubset  ? momoe::TrainConfig::SUBSET
                     : t.final_eval == FinalEval::kWhole ? momoe::TrainConfig::WHOLE
                     : t.final_eval == FinalEval::kNone  ? momoe::TrainConfig::NONE
                                                         : momoe::TrainConfig::BOTH);
  tr->set_tensorboard(t.tensorboard);
  tr->set_distributed_optimizer(t.distributed_optimizer);
  tr->set_loss_chunk_tokens(t.loss_chunk_tokens);
  tr->set_cuda_graphs(t.cuda_graphs);
  tr->set_precision(t.precision == Precision::kBf16 ? momoe::TrainConfig::BF16
                                                    : momoe::TrainConfig::FP32);
  tr->set_device(t.device == DeviceKind::kCuda ? momoe::TrainConfig::CUDA
                                               : momoe::TrainConfig::CPU);
  tr->set_recompute(recompute_to_proto(t.recompute));

  momoe::DataConfig* d = msg->mutable_data();
  if (cfg.data.dataset.empty()) {
    d->set_train(cfg.data.train);
    d->set_valid(cfg.data.valid);
    d->set_test(cfg.data.test);
  }
  d->set_dataset(cfg.data.dataset);
  momoe::TokenizerConfig* tk = d->mutable_tokenizer();
  tk->set_kind(cfg.data.sentencepiece ? momoe::TokenizerConfig::SENTENCEPIECE
                                      : momoe::TokenizerConfig::WORD);
  tk->set_model(cfg.data.sp_model);
  tk->set_model_type(cfg.data.sp_model_type);
  tk->set_vocab_size(cfg.data.sp_vocab_size);
  tk->set_max_sentences(cfg.data.sp_max_sentences);
  d->set_vocab_max_size(cfg.data.vocab_max_size);
  d->set_vocab_min_count(cfg.data.vocab_min_count);
  d->set_cache_dir(cfg.data.cache_dir);

  momoe::ParallelConfig* p = msg->mutable_parallel();
  p->set_ep(cfg.parallel.ep);
  p->set_backend(cfg.parallel.backend == CommBackend::kMpi    ? momoe::ParallelConfig::MPI
                 : cfg.parallel.backend == CommBackend::kNccl ? momoe::ParallelConfig::NCCL
                                                              : momoe::ParallelConfig::AUTO);
  p->set_timeout_seconds(cfg.parallel.timeout_seconds);
  p->set_setup_timeout_seconds(cfg.parallel.setup_timeout_seconds);
  p->set_threads(cfg.parallel.threads);
  p->set_placement(cfg.parallel.placement == Placement::kHosts ? momoe::ParallelConfig::HOSTS
                                                               : momoe::ParallelConfig::RANK_ORDER);
  p->set_hierarchical_all_to_all(cfg.parallel.hierarchical_all_to_all);
}

std::string field_value(const Message& msg, const FieldDescriptor* f, int index) {
  std::string v;
  google::protobuf::TextFormat::PrintFieldValueToString(msg, f, index, &v);
  return v;
}

// Appends every leaf field whose value differs between a and b (same type), as a dotted path
// ("model.blocks[1].moe.top_k"). A field set on one side only counts as a change.
void diff_messages(const Message& a, const Message& b, const std::string& prefix,
                   std::vector<ConfigChange>* out) {
  const google::protobuf::Descriptor* d = a.GetDescriptor();
  const google::protobuf::Reflection* ra = a.GetReflection();
  const google::protobuf::Reflection* rb = b.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string path = prefix + f->name();
    const bool is_msg = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (f->is_repeated()) {
      const int na = ra->FieldSize(a, f), nb = rb->FieldSize(b, f);
      for (int k = 0; k < std::min(na, nb); ++k) {
        const std::string at = str_cat(path, "[", k, "]");
        if (is_msg) {
          diff_messages(ra->GetRepeatedMessage(a, f, k), rb->GetRepeatedMessage(b, f, k), at + ".",
                        out);
        } else if (field_value(a, f, k) != field_value(b, f, k)) {
          out->push_back({at, field_value(a, f, k), field_value(b, f, k)});
        }
      }
      if (na != nb) out->push_back({path, str_cat(na, " entries"), str_cat(nb, " entries")});
      continue;
    }
    if (is_msg) {
      diff_messages(ra->GetMessage(a, f), rb->GetMessage(b, f), path + ".", out);
      continue;
    }
    const bool ha = !f->has_presence() || ra->HasField(a, f);
    const bool hb = !f->has_presence() || rb->HasField(b, f);
    const std::string va = ha ? field_value(a, f, -1) : "(unset)";
    const std::string vb = hb ? field_value(b, f, -1) : "(unset)";
    if (va != vb) out->push_back({path, va, vb});
  }
}

}  // namespace

// parallel.*: the layout, backend, timeouts and threads.
Status convert_parallel(const momoe::ParallelConfig& p, ParallelConfig* out) {
  if (p.has_ep()) out->ep = p.ep();
  if (out->ep < 1) {
    return invalid_argument_error("parallel.ep = ", out->ep,
                                  " is outside the allowed range [1, inf)");
  }
  if (p.backend() == momoe::ParallelConfig::MPI) out->backend = CommBackend::kMpi;
  if (p.backend() == momoe::ParallelConfig::NCCL) out->backend = CommBackend::kNccl;
  if (p.has_timeout_seconds()) out->timeout_seconds = p.timeout_seconds();
  if (p.has_setup_timeout_seconds()) out->setup_timeout_seconds = p.setup_timeout_seconds();
  if (p.has_threads()) out->threads = p.threads();
  if (p.placement() == momoe::ParallelConfig::HOSTS) out->placement = Placement::kHosts;
  if (p.has_hierarchical_all_to_all()) out->hierarchical_all_to_all = p.hierarchical_all_to_all();
  if (out->hierarchical_all_to_all && out->ep < 2) {
    return invalid_argument_error("parallel.hierarchical_all_to_all stages the exchange of an EP ",
                                  "group across hosts, but parallel.ep = ", out->ep,
                                  " exchanges nothing; set parallel.ep to the ranks of several ",
                                  "hosts or leave the option off");
  }
  if (out->threads < 0 || out->threads > 4096) {
    return invalid_argument_error("parallel.threads = ", out->threads,
                                  " is outside the allowed range [0, 4096] (0 = every core)");
  }
  for (const auto& [name, value] :
       {std::pair{"timeout_seconds", out->timeout_seconds},
        std::pair{"setup_timeout_seconds", out->setup_timeout_seconds}}) {
    if (!(value > 0) || !std::isfinite(value)) {
      return invalid_argument_error("parallel.", name, " = ", value,
                                    " is outside the allowed range (0, inf)");
    }
  }
  return Status::OK();
}

// data.tokenizer: a SentencePiece model, trained or given.
Status convert_tokenizer(const momoe::TokenizerConfig& tk, DataConfig* out) {
  out->sentencepiece = tk.kind() == momoe::TokenizerConfig::SENTENCEPIECE;
  if (tk.has_model()) out->sp_model = tk.model();
  if (tk.has_model_type()) out->sp_model_type = tk.model_type();
  if (tk.has_vocab_size()) out->sp_vocab_size = tk.vocab_size();
  if (tk.has_max_sentences()) out->sp_max_sentences = tk.max_sentences();
  if (out->sp_model_type != "bpe" && out->sp_model_type != "unigram") {
    return invalid_argument_error("data.tokenizer.model_type = '", out->sp_model_type,
                                  "' is not one of bpe, unigram");
  }
  if (out->sp_vocab_size <= 260) {
    return invalid_argument_error("data.tokenizer.vocab_size = ", out->sp_vocab_size,
                                  " is outside the allowed range (260, inf) (3 special pieces "
                                  "and 256 bytes)");
  }
  if (out->sp_max_sentences < 0) {
    return invalid_argument_error("data.tokenizer.max_sentences = ", out->sp_max_sentences,
                                  " is outside the allowed range [0, inf)");
  }
  if (!out->sentencepiece && tk.has_model() && !tk.model().empty()) {
    return invalid_argument_error("data.tokenizer.model names a SentencePiece model (", tk.model(),
                                  ") but data.tokenizer.kind is not SENTENCEPIECE");
  }
  return Status::OK();
}

// data.*: the corpus or prepared dataset, the vocabulary, the cache and the tokenizer.
Status convert_data(const momoe::DataConfig& d, DataConfig* out) {
  // Your own training text with the bundled evaluation splits would evaluate on Brown without a
  // word: a user's corpus names its own (or "" for none).
  if (d.has_train() && d.train() != DataConfig().train && (!d.has_valid() || !d.has_test())) {
    const bool both = !d.has_valid() && !d.has_test();
    const std::string missing = both             ? "data.valid and data.test are"
                                : !d.has_valid() ? "data.valid is"
                                                 : "data.test is";
    return invalid_argument_error(
        "data.train names your corpus (", d.train(), ") but ", missing,
        " not set, so the run would evaluate on the bundled Brown text: set ", both ? "them" : "it",
        " to held-out text of your corpus, or to \"\" to train without evaluating on ",
        both ? "them" : "it");
  }
  if (d.has_train()) out->train = d.train();
  if (d.has_valid()) out->valid = d.valid();
  if (d.has_test()) out->test = d.test();
  if (!d.dataset().empty()) {
    // A prepared dataset brings its own splits: a text named beside it would be ignored.
    for (const auto& [field, value] :
         {std::pair{"data.train", &d.train()}, std::pair{"data.valid", &d.valid()},
          std::pair{"data.test", &d.test()}}) {
      if (!value->empty()) {
        return invalid_argument_error(
            "data.dataset (", d.dataset(), ") and ", field, " (", *value,
            ") are both set: a prepared dataset brings its own train, valid and test splits; "
            "unset ",
            field, " (or prepare a dataset with that text)");
      }
    }
    out->dataset = d.dataset();
    out->train.clear();
    out->valid.clear();
    out->test.clear();
  }
  if (d.has_vocab_max_size()) out->vocab_max_size = d.vocab_max_size();
  if (d.has_vocab_min_count()) out->vocab_min_count = d.vocab_min_count();
  if (d.has_cache_dir()) out->cache_dir = d.cache_dir();
  if (d.has_tokenizer()) MOE_RETURN_IF_ERROR(convert_tokenizer(d.tokenizer(), out));
  if (out->vocab_max_size < 0) {
    return invalid_argument_error("data.vocab_max_size = ", out->vocab_max_size,
                                  " is outside the allowed range [0, inf)");
  }
  if (out->vocab_min_count < 1) {
    return invalid_argument_error("data.vocab_min_count = ", out->vocab_min_count,
                                  " is outside the allowed range [1, inf)");
  }
  return Status::OK();
}

namespace {

// The protobuf message (the file read, the overrides applied) converted and validated. Errors
// name the field, not where its value came from (blame_source adds that).
StatusOr<RunConfig> convert_run_config(const momoe::RunConfig& msg) {
  MOE_RETURN_IF_ERROR(check_finite(msg, ""));
  RunConfig cfg;
  MOE_RETURN_IF_ERROR(convert_parallel(msg.parallel(), &cfg.parallel));
  MOE_RETURN_IF_ERROR(convert_data(msg.data(), &cfg.data));
  MOE_RETURN_IF_ERROR(convert_model(msg.model(), &cfg.model));
  MOE_RETURN_IF_ERROR(convert_train(msg.train(), &cfg.train));
  if (cfg.parallel.backend == CommBackend::kNccl && cfg.train.device != DeviceKind::kCuda) {
    return invalid_argument_error(
        "parallel.backend = NCCL moves device memory between GPUs and needs train.device = CUDA "
        "(CPU ranks use the MPI backend)");
  }
  // Everything but the vocabulary size can be checked now.
  ModelConfig probe = cfg.model;
  if (probe.vocab_size == 0) probe.vocab_size = 2;
  MOE_RETURN_IF_ERROR(probe.validate(cfg.parallel.ep));
  return cfg;
}

// Whether `message` names the field `path` ("train.steps" in "train.steps = -5 is ...", not in
// "train.steps_x" nor "model.train.steps").
bool names_field(const std::string& message, const std::string& path) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = message.find(path); at != std::string::npos; at = message.find(path, at + 1)) {
    const size_t end = at + path.size();
    const bool starts = at == 0 || (!word(message[at - 1]) && message[at - 1] != '.');
    if (starts && (end == message.size() || !word(message[end]))) return true;
  }
  return false;
}

// A validation error in the words of where the offending value came from: the last --set (or
// --ep) that assigned a field the message names, else the config file.
Status blame_source(const Status& error, const std::string& source,
                    const std::vector<std::string>& overrides, int ep_size) {
  if (ep_size > 0 && names_field(error.message(), "parallel.ep")) {
    return error.with_context(str_cat("--ep ", ep_size));
  }
  // A block's MoE field ("model.blocks[1].moe.top_k") takes its default from model.moe.
  static const std::regex kBlockMoe(R"(model\.blocks\[[0-9]+\]\.moe\.)");
  const std::string plain = std::regex_replace(error.message(), kBlockMoe, "model.moe.");
  for (auto o = overrides.rbegin(); o != overrides.rend(); ++o) {
    const std::string path = o->substr(0, o->find('='));
    if (names_field(error.message(), path) || names_field(plain, path)) {
      return error.with_context(str_cat("--set '", *o, "'"));
    }
  }
  return error.with_context(source);
}

// The field `rel` ("top_k", "heavy_ball.mu") of a MoeConfig as protobuf text when `m` sets it
// (every enclosing message present too), else nullopt.
std::optional<std::string> set_field_text(const Message& m, const std::string& rel) {
  const Message* msg = &m;
  size_t start = 0;
  while (true) {
    const size_t dot = rel.find('.', start);
    const FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(
        rel.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (f == nullptr || f->is_repeated() || !msg->GetReflection()->HasField(*msg, f)) {
      return std::nullopt;
    }
    if (dot == std::string::npos) {
      std::string out;
      google::protobuf::TextFormat::PrintFieldValueToString(*msg, f, -1, &out);
      return out;
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return std::nullopt;
    msg = &msg->GetReflection()->GetMessage(*msg, f);
    start = dot + 1;
  }
}

// A `--set model.moe.x=v` that a block's own `moe.x` (another value, from the config file)
// keeps from that block would change less than it says: refused, naming the block.
Status check_moe_overrides_reach_blocks(const momoe::RunConfig& msg,
                                        const std::vector<std::string>& overrides) {
  static const std::string kPrefix = "model.moe.";
  for (const std::string& o : overrides) {
    const std::string path = o.substr(0, o.find('='));
    if (path.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string rel = path.substr(kPrefix.size());
    const std::optional<std::string> wanted = set_field_text(msg.model().moe(), rel);
    for (int b = 0; b < msg.model().blocks_size(); ++b) {
      const std::optional<std::string> own = set_field_text(msg.model().blocks(b).moe(), rel);
      if (!own.has_value() || own == wanted) continue;
      return invalid_argument_error(
          "--set '", o, "' does not reach model.blocks[", b, "]: the config sets model.blocks[", b,
          "].moe.", rel, " = ", *own,
          " for that block, which overrides model.moe. Change it in the config file (blocks are "
          "a repeated field, which --set cannot reach), or remove it there to inherit model.moe");
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<RunConfig> parse_run_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides, int ep_size) {
  momoe::RunConfig msg;
  MOE_RETURN_IF_ERROR(proto_internal::parse_text_proto(text, source, &msg));
  for (const std::string& o : overrides) MOE_RETURN_IF_ERROR(apply_override(o, &msg));
  MOE_RETURN_IF_ERROR(check_moe_overrides_reach_blocks(msg, overrides));
  if (ep_size > 0) msg.mutable_parallel()->set_ep(ep_size);
  StatusOr<RunConfig> cfg = convert_run_config(msg);
  if (!cfg.ok()) return blame_source(cfg.status(), source, overrides, ep_size);
  cfg->text = resolved_config_text(*cfg);
  return cfg;
}

StatusOr<RunConfig> load_run_config(const std::string& path,
                                    const std::vector<std::string>& overrides, int ep_size) {
  StatusOr<std::string> text = io::read_file(path);
  if (!text.ok()) {
    return Status(text.status().code(), str_cat("config file: ", text.status().message()));
  }
  return parse_run_config(*text, path, overrides, ep_size);
}

std::string resolved_config_text(const RunConfig& cfg) {
  momoe::RunConfig msg;
  run_config_to_proto(cfg, &msg);
  std::string text;
  google::protobuf::TextFormat::PrintToString(msg, &text);
  return text;
}

StatusOr<std::vector<ConfigChange>> diff_configs(const std::string& before,
                                                 const std::string& after) {
  momoe::RunConfig a, b;
  MOE_RETURN_IF_ERROR(proto_internal::parse_text_proto(before, "the checkpoint's config", &a));
  MOE_RETURN_IF_ERROR(proto_internal::parse_text_proto(after, "this run's config", &b));
  std::vector<ConfigChange> out;
  diff_messages(a, b, "", &out);
  return out;
}

bool changes_training(const ConfigChange& change) {
  // Fields that steer the run, not what it computes: the layout, how long it trains, what it
  // logs, evaluates and keeps, the precision and device (checkpoints hold fp32 masters, so a run
  // may resume at the other precision or on the other device), the activation recomputation
  // (bit-identical at every setting), where the optimizer state lives (the distributed
  // optimizer computes the same weights), and the loss's chunk (a memory setting that moves only
  // the rounding of the head's gradient).
  static const char* const kRunControl[] = {"parallel.",
                                            "train.steps",
                                            "train.grad_accum",
                                            "train.eval_every",
                                            "train.eval_sequences",
                                            "train.checkpoint_every",
                                            "train.keep_checkpoints",
                                            "train.checkpoint_minutes",
                                            "train.log_every",
                                            "train.attack_rate",
                                            "train.attack_seed",
                                            "train.probe_every",
                                            "train.probe_sequences",
                                            "train.collapse_threshold",
                                            "train.precision",
                                            "train.device",
                                            "train.max_skipped_steps",
                                            "train.final_eval",
                                            "train.tensorboard",
                                            "train.recompute",
                                            "train.distributed_optimizer",
                                            "train.loss_chunk_tokens",
                                            "train.cuda_graphs",
                                            "data.valid",
                                            "data.test",
                                            "data.cache_dir"};
  for (const char* prefix : kRunControl) {
    const std::string_view p(prefix);
    if (change.path.compare(0, p.size(), p) == 0 &&
        (p.back() == '.' || change.path.size() == p.size())) {
      return false;
    }
  }
  return true;
}

}  // namespace moe
