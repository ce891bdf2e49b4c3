// Run configuration files: defaults, arch strings and explicit blocks, MoE defaults and per-block
// overrides, --set overrides, the learning-rate schedule, and errors that name the problem.
#include "proto/run_convert.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "proto/train.pb.h"

namespace moe {
namespace {

const char* kConfig = R"(
model {
  d_model: 32 n_heads: 4 seq_len: 16 arch: "sgsmsfsm"
  moe { num_experts: 4 top_k: 2 heavy_ball { mu: 0.6 } }
}
train { steps: 10 batch_size: 4 optimizer { lr: 0.01 } schedule { warmup_steps: 2 } }
)";

TEST(RunConfigTest, ArchStringAndMoeDefaults) {
  StatusOr<RunConfig> c = parse_run_config(kConfig, "test.pbtxt");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const ModelConfig& m = c->model;
  ASSERT_EQ(m.blocks.size(), 4u);
  EXPECT_TRUE(m.blocks[0].moe);
  EXPECT_EQ(m.blocks[0].moe_cfg.residual, ResidualKind::kPlain);
  EXPECT_EQ(m.blocks[1].moe_cfg.residual, ResidualKind::kHeavyBall);
  EXPECT_DOUBLE_EQ(m.blocks[1].moe_cfg.heavy_ball.mu, 0.6);
  EXPECT_FALSE(m.blocks[2].moe);
  EXPECT_EQ(m.blocks[1].moe_cfg.d_model, 32);
  EXPECT_EQ(m.blocks[1].moe_cfg.d_expert, 32);                // defaults to d_model
  EXPECT_DOUBLE_EQ(m.blocks[1].moe_cfg.expert_dropout, 0.1);  // the model's dropout
  EXPECT_EQ(m.d_ff, 64);
  EXPECT_EQ(m.num_moe_layers(), 3);
  EXPECT_EQ(c->parallel.ep, 1);
  EXPECT_NE(c->data.train.find("data/brown/train.txt.gz"), std::string::npos);
  // The resolved text parses again to the same configuration.
  StatusOr<RunConfig> again = parse_run_config(c->text, "resolved");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->text, c->text);
}

TEST(RunConfigTest, OverridesAndEpFlag) {
  StatusOr<RunConfig> c = parse_run_config(
      kConfig, "test.pbtxt",
      {"train.steps=99", "model.moe.heavy_ball.mu=0.3", "data.train=other.txt",
       "data.valid=other_valid.txt", "data.test=", "model.arch=sgsg", "train.optimizer.kind=SGD"},
      /*ep_size=*/2);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.steps, 99);
  EXPECT_EQ(c->data.train, "other.txt");
  EXPECT_EQ(c->model.blocks.size(), 2u);
  EXPECT_EQ(c->parallel.ep, 2);
  EXPECT_EQ(c->train.optimizer.kind, OptimizerKind::kSgd);

  auto error = [](const std::vector<std::string>& set, int ep = 0) {
    StatusOr<RunConfig> r = parse_run_config(kConfig, "test.pbtxt", set, ep);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(error({"train.stepz=1"}).find("has no field 'stepz'"), std::string::npos);
  EXPECT_NE(error({"train.steps=many"}).find("not a valid value"), std::string::npos);
  EXPECT_NE(error({"train.steps"}).find("expected field.path=value"), std::string::npos);
  EXPECT_NE(error({"model.moe=1"}).find("is a message"), std::string::npos);
  EXPECT_NE(error({}, 3).find("not divisible by the expert-parallel size 3"), std::string::npos);
  // A user's training text with the bundled evaluation text is refused, naming what is missing.
  EXPECT_NE(error({"data.train=mine.txt"})
                .find("data.train names your corpus (mine.txt) but data.valid and data.test are "
                      "not set"),
            std::string::npos);
  EXPECT_NE(error({"data.train=mine.txt", "data.valid=v.txt"}).find("but data.test is not set"),
            std::string::npos);
  EXPECT_NE(error({"train.optimizer.weight_decay=inf"})
                .find("train.optimizer.weight_decay = inf is not a finite number"),
            std::string::npos);
}

// parallel.placement and parallel.hierarchical_all_to_all: RANK_ORDER and off by default, set by
// --set, written out in the resolved text, not a change to what training computes (a run may
// resume under another layout), and a staged exchange without an EP group to stage refused.
TEST(RunConfigTest, PlacementAndHierarchicalAllToAll) {
  StatusOr<RunConfig> plain = parse_run_config(kConfig, "test.pbtxt");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->parallel.placement, Placement::kRankOrder);
  EXPECT_FALSE(plain->parallel.hierarchical_all_to_all);
  EXPECT_NE(plain->text.find("placement: RANK_ORDER"), std::string::npos) << plain->text;
  StatusOr<RunConfig> hosts = parse_run_config(
      kConfig, "test.pbtxt", {"parallel.placement=HOSTS", "parallel.hierarchical_all_to_all=true"},
      /*ep_size=*/4);
  ASSERT_TRUE(hosts.ok()) << hosts.status().to_string();
  EXPECT_EQ(hosts->parallel.placement, Placement::kHosts);
  EXPECT_TRUE(hosts->parallel.hierarchical_all_to_all);
  StatusOr<RunConfig> again = parse_run_config(hosts->text, "resolved");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->parallel.placement, Placement::kHosts);
  EXPECT_TRUE(again->parallel.hierarchical_all_to_all);
  StatusOr<std::vector<ConfigChange>> d = diff_configs(plain->text, hosts->text);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  for (const ConfigChange& c : *d) EXPECT_FALSE(changes_training(c)) << c.path;
  StatusOr<RunConfig> nothing_to_stage =
      parse_run_config(kConfig, "test.pbtxt", {"parallel.hierarchical_all_to_all=true"});
  ASSERT_FALSE(nothing_to_stage.ok());
  EXPECT_NE(nothing_to_stage.status().message().find(
                "--set 'parallel.hierarchical_all_to_all=true': parallel.hierarchical_all_to_all "
                "stages the exchange of an EP group across hosts, but parallel.ep = 1"),
            std::string::npos)
      << nothing_to_stage.status().to_string();
}

// An error names where the bad value came from: the --set argument (the last one that set the
// field), the --ep flag, or the config file; a misspelt field gets the closest known ones.
TEST(RunConfigTest, ErrorsNameTheirSource) {
  auto error = [](const std::vector<std::string>& set, int ep = 0) {
    StatusOr<RunConfig> r = parse_run_config(kConfig, "test.pbtxt", set, ep);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  const auto starts = [](const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
  };
  EXPECT_PRED2(starts, error({"train.steps=-5"}),
               "--set 'train.steps=-5': train.steps = -5 is outside the allowed range");
  EXPECT_PRED2(starts, error({"train.steps=-1", "train.log_every=2", "train.steps=-2"}),
               "--set 'train.steps=-2': ");
  EXPECT_PRED2(starts, error({"train.optimizer.weight_decay=inf"}),
               "--set 'train.optimizer.weight_decay=inf': ");
  EXPECT_PRED2(starts, error({"model.moe.top_k=9"}), "--set 'model.moe.top_k=9': ");
  EXPECT_PRED2(starts, error({"data.train=mine.txt"}), "--set 'data.train=mine.txt': ");
  EXPECT_PRED2(starts, error({"parallel.ep=0"}), "--set 'parallel.ep=0': ");
  // A field named only as part of a longer one is not blamed.
  EXPECT_PRED2(starts, error({"train.eval_every=5", "train.steps=-5"}), "--set 'train.steps=-5'");
  // A value of the file stays the file's, whatever --set changed beside it.
  StatusOr<RunConfig> file = parse_run_config("model { arch: \"sf\" } train { batch_size: 0 }",
                                              "bad.pbtxt", {"train.steps=3"});
  ASSERT_FALSE(file.ok());
  EXPECT_PRED2(starts, file.status().message(), "bad.pbtxt: train.batch_size = 0");
  // Misspelt fields, by --set and in the file.
  EXPECT_NE(error({"train.step=10"}).find("has no field 'step' (did you mean train.steps?)"),
            std::string::npos)
      << error({"train.step=10"});
  EXPECT_NE(error({"train.optimizer.weigth_decay=0"})
                .find("(did you mean train.optimizer.weight_decay?)"),
            std::string::npos);
  EXPECT_EQ(error({"train.bogus_name=1"}).find("did you mean"), std::string::npos);
  StatusOr<RunConfig> typo = parse_run_config("trian { stepz: 3 }", "typo.pbtxt");
  EXPECT_NE(typo.status().message().find("no field named \"trian\". (did you mean train?)"),
            std::string::npos)
      << typo.status().message();
  typo = parse_run_config("train { stepz: 3 }", "typo.pbtxt");
  EXPECT_NE(typo.status().message().find("(did you mean steps?)"), std::string::npos)
      << typo.status().message();
  // Misspelt enum values: the choices, and the closest one.
  typo = parse_run_config("train { optimizer { kind: ADAMX } }", "typo.pbtxt");
  EXPECT_NE(typo.status().message().find("(did you mean ADAMW?)"), std::string::npos)
      << typo.status().message();
  EXPECT_NE(error({"train.optimizer.kind=ADAMX"})
                .find("is not a valid value for momoe.OptimizerConfig.kind (one of ADAMW, SGD; "
                      "did you mean ADAMW?)"),
            std::string::npos)
      << error({"train.optimizer.kind=ADAMX"});
  EXPECT_NE(error({"train.precision=fp64"}).find("(one of FP32, BF16)"), std::string::npos)
      << error({"train.precision=fp64"});
}

TEST(RunConfigTest, PlanErrors) {
  auto error = [](const std::string& text) {
    StatusOr<RunConfig> r = parse_run_config(text, "bad.pbtxt");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  const std::string moe = " moe { num_experts: 4 } ";
  EXPECT_NE(error("model { arch: \"scsg\"" + moe + "}")
                .find("first MoE layer must use the standard router"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sgsa\"" + moe + "}").find("only used in the first MoE layer"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sgx\"" + moe + "}").find("must be pairs"), std::string::npos);
  EXPECT_NE(error("model { arch: \"sgsq\"" + moe + "}").find("expected one of g, m, a, r, c, f"),
            std::string::npos);
  EXPECT_NE(error("model { d_model: 30 n_heads: 4 arch: \"sf\" }").find("not divisible by n_heads"),
            std::string::npos);
  EXPECT_NE(error("model {" + moe + "}").find("no blocks"), std::string::npos);
  EXPECT_NE(error("model { arch: \"sg\" moe { num_experts: 4 top_k: 9 } }")
                .find("model.blocks[0].moe.top_k = 9"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sf\" } train { batch_size: 0 }").find("train.batch_size = 0"),
            std::string::npos);
  EXPECT_NE(
      error("model { arch: \"sf\" } train { schedule { min_lr_ratio: 2 } }").find("min_lr_ratio"),
      std::string::npos);
  // Explicit blocks with a per-block override.
  StatusOr<RunConfig> c = parse_run_config(
      "model { blocks { kind: MOE } blocks { kind: MOE moe { residual: ROBUST } } blocks { kind: "
      "DENSE }" +
          moe + "}",
      "blocks.pbtxt");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model.blocks[1].moe_cfg.residual, ResidualKind::kRobust);
  EXPECT_FALSE(c->model.blocks[2].moe);
  EXPECT_EQ(load_run_config("/nonexistent/x.pbtxt").status().code(), StatusCode::kNotFound);
}

// Every field of a resolved config is explicit, recursively: optional fields are present and
// enums are never UNSPECIFIED. The only fields left out are `model.arch` (shorthand for the
// blocks, which are explicit) and the `moe` of a dense block. Together with the round trip below
// this proves that a stored resolved config means the same model under any build's defaults:
// the converters consult a default only for an absent field.
void expect_every_field_set(const google::protobuf::Message& msg, const std::string& path,
                            const std::string& source) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = msg.GetDescriptor();
  const google::protobuf::Reflection* r = msg.GetReflection();
  // A block's moe holds only its overrides of model.moe (which is complete).
  const bool block = d->full_name() == "momoe.BlockConfig";
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string at = path + f->name();
    if (at == "model.arch" || (block && f->name() == "moe")) continue;
    if (f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(msg, f); ++k) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          expect_every_field_set(r->GetRepeatedMessage(msg, f, k), str_cat(at, "[", k, "]."),
                                 source);
        }
      }
      continue;
    }
    if (f->has_presence()) {
      EXPECT_TRUE(r->HasField(msg, f)) << source << ": " << at << " is not explicit";
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      EXPECT_NE(r->GetEnumValue(msg, f), 0) << source << ": " << at << " is UNSPECIFIED";
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && r->HasField(msg, f)) {
      expect_every_field_set(r->GetMessage(msg, f), at + ".", source);
    }
  }
}

std::vector<std::string> config_files() {
  std::vector<std::string> out;
  // configs/ and configs/modern/ (configs/papers/ name corpora of their own:
  // paper_presets_test).
  const std::vector<std::string> dirs = {MOE_CONFIG_DIR, MOE_CONFIG_DIR + std::string("/modern")};
  for (const std::string& dir : dirs) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == ".pbtxt") out.push_back(e.path().string());
    }
  }
  return out;
}

TEST(RunConfigTest, ResolvedConfigIsCompleteAndRoundTrips) {
  const std::vector<std::string> files = config_files();
  ASSERT_GE(files.size(), 8u);
  std::vector<std::pair<std::string, StatusOr<RunConfig>>> cases;
  for (const std::string& f : files) cases.emplace_back(f, load_run_config(f));
  cases.emplace_back("kConfig", parse_run_config(kConfig, "kConfig"));
  cases.emplace_back(
      "blocks",
      parse_run_config(
          "model { blocks { kind: MOE moe { num_experts: 4 residual: ADAM adam { reference_code: "
          "true } } }"
          " blocks { kind: DENSE } blocks { kind: MOE moe { num_experts: 4 dropless: true } } }"
          " train { precision: BF16 optimizer { kind: SGD momentum: 0.9 } schedule { kind: COSINE "
          "} }"
          " parallel { backend: MPI timeout_seconds: 12.5 }",
          "blocks"));
  for (auto& [name, cfg] : cases) {
    ASSERT_TRUE(cfg.ok()) << name << ": " << cfg.status().to_string();
    momoe::RunConfig msg;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(cfg->text, &msg)) << name;
    expect_every_field_set(msg, "", name);
    StatusOr<RunConfig> again = parse_run_config(cfg->text, name + " (resolved)");
    ASSERT_TRUE(again.ok()) << name << ": " << again.status().to_string();
    EXPECT_EQ(again->text, cfg->text) << name;
    EXPECT_EQ(again->model.blocks.size(), cfg->model.blocks.size());
  }
}

// A printed config (every field explicit, the model as blocks) takes `--set model.moe.x` into
// every block as the config it was printed from does: the blocks keep only what differs from
// model.moe. An override that a block's own setting would keep from that block is refused.
TEST(RunConfigTest, PrintedConfigTakesModelMoeOverridesInEveryBlock) {
  StatusOr<RunConfig> original = parse_run_config(kConfig, "kConfig");
  ASSERT_TRUE(original.ok()) << original.status().to_string();
  const std::vector<std::string> set = {"model.moe.num_experts=8", "model.moe.top_k=1",
                                        "model.moe.heavy_ball.mu=0.5"};
  StatusOr<RunConfig> from_file = parse_run_config(kConfig, "kConfig", set);
  StatusOr<RunConfig> from_printed = parse_run_config(original->text, "printed", set);
  ASSERT_TRUE(from_file.ok()) << from_file.status().to_string();
  ASSERT_TRUE(from_printed.ok()) << from_printed.status().to_string();
  EXPECT_EQ(from_printed->text, from_file->text);
  for (const BlockPlan& b : from_printed->model.blocks) {
    if (!b.moe) continue;
    EXPECT_EQ(b.moe_cfg.num_experts, 8);
    EXPECT_EQ(b.moe_cfg.top_k, 1);
    EXPECT_EQ(b.moe_cfg.heavy_ball.mu, 0.5);
  }
  // A block that sets top_k itself keeps it: the override is refused, naming the block.
  const std::string own =
      "model { d_model: 32 n_heads: 4 seq_len: 16 moe { num_experts: 4 }"
      " blocks { kind: MOE } blocks { kind: MOE moe { top_k: 1 } } }";
  StatusOr<RunConfig> shadowed = parse_run_config(own, "own", {"model.moe.top_k=3"});
  ASSERT_FALSE(shadowed.ok());
  EXPECT_EQ(shadowed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shadowed.status().message().find("does not reach model.blocks[1]"), std::string::npos)
      << shadowed.status().to_string();
  EXPECT_NE(shadowed.status().message().find("model.blocks[1].moe.top_k = 1"), std::string::npos)
      << shadowed.status().to_string();
  // The same value, or a field the block leaves alone, passes.
  EXPECT_TRUE(parse_run_config(own, "own", {"model.moe.top_k=1"}).ok());
  EXPECT_TRUE(parse_run_config(own, "own", {"model.moe.num_experts=8"}).ok());
}

TEST(RunConfigTest, DiffListsEveryChangedFieldAndWhichChangeTraining) {
  StatusOr<RunConfig> a = parse_run_config(kConfig, "a");
  StatusOr<RunConfig> b =
      parse_run_config(kConfig, "b",
                       {"train.steps=20", "model.moe.top_k=3", "parallel.timeout_seconds=5",
                        "train.tensorboard=false", "train.distributed_optimizer=true"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->train.tensorboard);  // on by default
  EXPECT_FALSE(b->train.tensorboard);
  EXPECT_FALSE(a->train.distributed_optimizer);  // off by default
  EXPECT_TRUE(b->train.distributed_optimizer);
  StatusOr<std::vector<ConfigChange>> d = diff_configs(a->text, b->text);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::map<std::string, ConfigChange> by_path;
  for (const ConfigChange& c : *d) by_path[c.path] = c;
  ASSERT_TRUE(by_path.count("train.steps"));
  EXPECT_EQ(by_path["train.steps"].before, "10");
  EXPECT_EQ(by_path["train.steps"].after, "20");
  EXPECT_FALSE(changes_training(by_path["train.steps"]));
  EXPECT_FALSE(changes_training(by_path["parallel.timeout_seconds"]));
  ASSERT_TRUE(by_path.count("train.tensorboard"));
  EXPECT_FALSE(changes_training(by_path["train.tensorboard"]));
  // The distributed optimizer computes the same weights: a run may resume with or without it.
  ASSERT_TRUE(by_path.count("train.distributed_optimizer"));
  EXPECT_FALSE(changes_training(by_path["train.distributed_optimizer"]));
  // top_k of the model-wide MoE config, which every MoE block inherits (no block sets its own).
  ASSERT_TRUE(by_path.count("model.moe.top_k"));
  EXPECT_TRUE(changes_training(by_path["model.moe.top_k"]));
  EXPECT_EQ(d->size(), 5u);
  StatusOr<RunConfig> c = parse_run_config(kConfig, "c", {"model.arch=sgsm"});
  ASSERT_TRUE(c.ok());
  d = diff_configs(a->text, c->text);
  ASSERT_TRUE(d.ok());
  bool saw_count = false;
  for (const ConfigChange& ch : *d)
    saw_count |= ch.path == "model.blocks" && ch.before == "4 entries";
  EXPECT_TRUE(saw_count);
  EXPECT_TRUE(diff_configs(a->text, a->text)->empty());
  // A config file that is a directory is refused, naming it.
  StatusOr<RunConfig> dir = load_run_config(MOE_CONFIG_DIR);
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument) << dir.status().to_string();
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
}

// train.recompute: NONE by default and in the resolved text; each setting round-trips through
// the resolved text; a misspelt or out-of-range value is refused with the choices; a change
// between runs does not change what training computes (the settings are bit-identical).
TEST(RunConfigTest, RecomputeRoundTripsAndIsValidated) {
  StatusOr<RunConfig> a = parse_run_config(kConfig, "a");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->train.recompute, Recompute::kNone);
  EXPECT_NE(a->text.find("recompute: NONE"), std::string::npos) << a->text;
  for (const Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const std::string name = recompute_name(r);
    StatusOr<RunConfig> b = parse_run_config(kConfig, "b", {"train.recompute=" + name});
    ASSERT_TRUE(b.ok()) << name << ": " << b.status().to_string();
    EXPECT_EQ(b->train.recompute, r) << name;
    EXPECT_NE(b->text.find("recompute: " + name), std::string::npos) << b->text;
    StatusOr<RunConfig> again = parse_run_config(b->text, "resolved");
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(again->train.recompute, r) << name;
    EXPECT_EQ(again->text, b->text) << name;
    StatusOr<std::vector<ConfigChange>> d = diff_configs(a->text, b->text);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d->size(), r == Recompute::kNone ? 0u : 1u) << name;
    if (r != Recompute::kNone) {
      EXPECT_EQ((*d)[0].path, "train.recompute");
      EXPECT_FALSE(changes_training((*d)[0])) << name;
    }
  }
  StatusOr<RunConfig> file =
      parse_run_config("model { arch: \"sf\" } train { recompute: SELECTIVE }", "file.pbtxt");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->train.recompute, Recompute::kSelective);
  StatusOr<RunConfig> typo = parse_run_config(kConfig, "c", {"train.recompute=SELECTIV"});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("(one of NONE, SELECTIVE, FULL; did you mean SELECTIVE?)"),
            std::string::npos)
      << typo.status().message();
  StatusOr<RunConfig> number = parse_run_config(kConfig, "c", {"train.recompute=7"});
  ASSERT_FALSE(number.ok());
  EXPECT_EQ(number.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(number.status().message().find("train.recompute"), std::string::npos)
      << number.status().message();
}

TEST(RunConfigTest, LearningRateSchedule) {
  TrainConfig t;
  t.optimizer.lr = 1.0;
  t.warmup_steps = 4;
  t.steps = 14;
  EXPECT_DOUBLE_EQ(t.learning_rate(0), 0.25);
  EXPECT_DOUBLE_EQ(t.learning_rate(3), 1.0);
  EXPECT_DOUBLE_EQ(t.learning_rate(10), 1.0);
  t.schedule = LrScheduleKind::kCosine;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(t.learning_rate(4), 1.0);
  EXPECT_NEAR(t.learning_rate(13), 0.1, 1e-12);
  EXPECT_NEAR(t.learning_rate(8), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 4.0 / 9.0)), 1e-12);
}

}  // namespace
}  // namespace moe
