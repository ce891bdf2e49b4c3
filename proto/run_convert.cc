#include "proto/run_convert.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <fstream>
#include <sstream>

#include "core/base/check.h"
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
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const FieldDescriptor* field = msg->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr) {
      return invalid_argument_error("--set '", assignment, "': ", msg->GetDescriptor()->full_name(),
                                    " has no field '", name, "'");
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
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && (value.empty() || value[0] != '"')) {
        value = "\"" + value + "\"";
      }
      google::protobuf::TextFormat::Parser parser;
      QuietErrors quiet;
      parser.RecordErrorsTo(&quiet);
      if (!parser.ParseFieldValueFromString(value, field, msg)) {
        return invalid_argument_error("--set '", assignment, "': '", assignment.substr(eq + 1),
                                      "' is not a valid value for ", field->full_name());
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
    case momoe::RELU: return ExpertActivation::kRelu;
    case momoe::GELU: return ExpertActivation::kGelu;
    case momoe::GELU_TANH: return ExpertActivation::kGeluTanh;
    default: return fallback;
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

  // MoE defaults: width from the model, expert hidden width = d_model (the reference code's LM
  // experts), dropouts from the model's dropout.
  MoeLayerConfig moe_default;
  moe_default.d_model = c->d_model;
  moe_default.d_expert = c->d_model;
  moe_default.expert_dropout = c->dropout;
  moe_default.output_dropout = c->dropout;
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
      MOE_RETURN_IF_ERROR(proto_internal::apply_moe_proto(blk.moe(), where + ".moe", &plan.moe_cfg));
      c->blocks.push_back(plan);
    }
  } else {
    return invalid_argument_error("model: no blocks; set arch (e.g. \"sgsmsm\") or blocks");
  }
  return Status::OK();
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
  if (t.has_log_every()) c->log_every = t.log_every();
  if (t.has_attack_rate()) c->attack_rate = t.attack_rate();
  if (t.has_attack_seed()) c->attack_seed = t.attack_seed();
  if (t.has_probe_every()) c->probe_every = t.probe_every();
  if (t.has_probe_sequences()) c->probe_sequences = t.probe_sequences();
  if (t.has_collapse_threshold()) c->collapse_threshold = t.collapse_threshold();
  if (t.precision() == momoe::TrainConfig::BF16) c->precision = Precision::kBf16;
  if (t.device() == momoe::TrainConfig::CUDA) c->device = DeviceKind::kCuda;
  return c->validate();
}

}  // namespace

StatusOr<RunConfig> parse_run_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides, int ep_size) {
  momoe::RunConfig msg;
  MOE_RETURN_IF_ERROR(proto_internal::parse_text_proto(text, source, &msg));
  for (const std::string& o : overrides) MOE_RETURN_IF_ERROR(apply_override(o, &msg));
  if (ep_size > 0) msg.mutable_parallel()->set_ep(ep_size);

  RunConfig cfg;
  const momoe::ParallelConfig& p = msg.parallel();
  if (p.has_ep()) cfg.parallel.ep = p.ep();
  if (cfg.parallel.ep < 1) {
    return invalid_argument_error("parallel.ep = ", cfg.parallel.ep,
                                  " is outside the allowed range [1, inf)");
  }
  if (p.backend() == momoe::ParallelConfig::MPI) cfg.parallel.backend = CommBackend::kMpi;
  if (p.backend() == momoe::ParallelConfig::NCCL) cfg.parallel.backend = CommBackend::kNccl;
  if (p.has_timeout_seconds()) cfg.parallel.timeout_seconds = p.timeout_seconds();
  if (!(cfg.parallel.timeout_seconds > 0)) {
    return invalid_argument_error("parallel.timeout_seconds = ", cfg.parallel.timeout_seconds,
                                  " is outside the allowed range (0, inf)");
  }

  const momoe::DataConfig& d = msg.data();
  if (d.has_train()) cfg.data.train = d.train();
  if (d.has_valid()) cfg.data.valid = d.valid();
  if (d.has_test()) cfg.data.test = d.test();
  if (d.has_vocab_max_size()) cfg.data.vocab_max_size = d.vocab_max_size();
  if (d.has_vocab_min_count()) cfg.data.vocab_min_count = d.vocab_min_count();
  if (d.has_cache_dir()) cfg.data.cache_dir = d.cache_dir();
  if (cfg.data.vocab_max_size < 0) {
    return invalid_argument_error("data.vocab_max_size = ", cfg.data.vocab_max_size,
                                  " is outside the allowed range [0, inf)");
  }
  if (cfg.data.vocab_min_count < 1) {
    return invalid_argument_error("data.vocab_min_count = ", cfg.data.vocab_min_count,
                                  " is outside the allowed range [1, inf)");
  }

  MOE_RETURN_IF_ERROR(convert_model(msg.model(), &cfg.model).with_context(source));
  MOE_RETURN_IF_ERROR(convert_train(msg.train(), &cfg.train).with_context(source));
  // Everything but the vocabulary size can be checked now.
  ModelConfig probe = cfg.model;
  if (probe.vocab_size == 0) probe.vocab_size = 2;
  MOE_RETURN_IF_ERROR(probe.validate(cfg.parallel.ep).with_context(source));

  google::protobuf::TextFormat::PrintToString(msg, &cfg.text);
  return cfg;
}

StatusOr<RunConfig> load_run_config(const std::string& path,
                                    const std::vector<std::string>& overrides, int ep_size) {
  std::ifstream in(path);
  if (!in) return not_found_error("config file ", path, " cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return data_loss_error("config file ", path, " could not be read");
  return parse_run_config(buffer.str(), path, overrides, ep_size);
}

}  // namespace moe
