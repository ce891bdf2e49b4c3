#include "core/checkpoint/training_checkpoint.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "comm/agree.h"
#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/safetensors.h"
#include "io/file_util.h"

namespace moe {
namespace {

constexpr const char* kDenseFile = "dense.safetensors";
constexpr const char* kOptDenseFile = "optimizer-dense.safetensors";

std::string expert_file(const char* kind, int ep_rank, int ep_size) {
  return str_cat(kind, "-ep", ep_rank, "-of-", ep_size, ".safetensors");
}

int ep_rank_of(const comm::ProcessGroups* g) { return g == nullptr ? 0 : g->ep_rank; }
int ep_size_of(const comm::ProcessGroups* g) { return g == nullptr ? 1 : g->ep_size; }
int dp_rank_of(const comm::ProcessGroups* g) { return g == nullptr ? 0 : g->dp_rank; }

// Host copies of the masters and the whole optimizer state of one kind, laid out like the arena
// (without its padding).
struct HostArenas {
  Tensor masters;
  std::vector<Tensor> state;  // per optimizer slot
};

// For the rank that writes them (`writer`); the others get empty arenas. Collective over the
// kind's group when its optimizer state is sharded (every rank sends its chunk to the writer,
// the group's first rank, and its chunk of the masters when they are sharded too): no other
// rank ever holds a whole arena.
StatusOr<HostArenas> read_back_arenas(const TrainingState& st, ParamKind kind, bool writer) {
  using GatherTo = Optimizer::GatherTo;
  const ArenaShard& shard = st.optimizer->sharding().of(kind);
  if (shard.sharded() && writer != (shard.rank == 0)) {
    return internal_error("checkpoint: a sharded kind's writer must be its group's first rank ",
                          "(group rank ", shard.rank, ", writer ", writer ? "yes" : "no", ")");
  }
  HostArenas h;
  if (writer || st.model->params().masters_sharded(kind)) {
    MOE_ASSIGN_OR_RETURN(Tensor masters, st.optimizer->whole_masters(kind, GatherTo::kFirstRank));
    if (writer) h.masters = std::move(masters);
  }
  if (!writer && !shard.sharded()) return h;
  for (int slot = 0; slot < st.optimizer->slots(); ++slot) {
    MOE_ASSIGN_OR_RETURN(Tensor s, st.optimizer->whole_state(slot, kind, GatherTo::kFirstRank));
    if (writer) h.state.push_back(std::move(s));
  }
  return h;
}

// The dense files: rank 0's (the masters, the optimizer state, the tokenizer).
Status write_dense(const std::string& tmp, const TrainingState& st, const HostArenas& host,
                   const std::vector<Optimizer::StateTensor>& opt) {
  ckpt::SafetensorsWriter dense, opt_dense;
  for (const auto& p : st.model->params().all()) {
    if (p->kind == ParamKind::kDense) dense.add(p->name, p->slice_of(host.masters));
  }
  for (const auto& s : opt) {
    if (s.param->kind == ParamKind::kDense)
      opt_dense.add(s.name, s.param->slice_of(host.state[s.slot]));
  }
  MOE_RETURN_IF_ERROR(dense.write(tmp + "/" + kDenseFile));
  MOE_RETURN_IF_ERROR(opt_dense.write(tmp + "/" + kOptDenseFile));
  return st.tokenizer->save(tmp);
}

// One copy of the expert shards: the first DP group's (every DP replica is identical).
Status write_experts(const std::string& tmp, const TrainingState& st, const HostArenas& host,
                     const std::vector<Optimizer::StateTensor>& opt, int ep_rank, int ep_size) {
  ckpt::SafetensorsWriter experts, opt_experts;
  int64_t first = 0, local = 0, global = 0;
  for (const auto& p : st.model->params().all()) {
    if (p->kind != ParamKind::kExpert) continue;
    experts.add(p->name, p->slice_of(host.masters));
    first = p->first_expert;
    local = p->shape[0];
    global = p->global_experts;
  }
  for (const auto& s : opt) {
    if (s.param->kind == ParamKind::kExpert) {
      opt_experts.add(s.name, s.param->slice_of(host.state[s.slot]));
    }
  }
  for (auto* w : {&experts, &opt_experts}) {
    w->set_metadata("first_expert", std::to_string(first));
    w->set_metadata("local_experts", std::to_string(local));
    w->set_metadata("global_experts", std::to_string(global));
  }
  MOE_RETURN_IF_ERROR(experts.write(tmp + "/" + expert_file("experts", ep_rank, ep_size)));
  return opt_experts.write(tmp + "/" + expert_file("optimizer-experts", ep_rank, ep_size));
}

// One kind at a time, so that the writers hold one kind's host arenas at once: its collectives
// (a sharded kind's gathering) on every rank in the same order, then its writes. A failed write
// is kept, not returned, until the other kind's collectives have run too (every rank reaches
// them), so that no rank waits for a peer that left.
Status write_files(const std::string& tmp, const TrainingState& st, const comm::ProcessGroups* g,
                   int rank) {
  const std::vector<Optimizer::StateTensor> opt = st.optimizer->state_tensors();
  Status written;
  {
    MOE_ASSIGN_OR_RETURN(HostArenas host, read_back_arenas(st, ParamKind::kDense, rank == 0));
    if (rank == 0) written = write_dense(tmp, st, host, opt);
  }
  const bool expert_writer = dp_rank_of(g) == 0;
  MOE_ASSIGN_OR_RETURN(HostArenas host, read_back_arenas(st, ParamKind::kExpert, expert_writer));
  if (expert_writer && written.ok()) {
    written = write_experts(tmp, st, host, opt, ep_rank_of(g), ep_size_of(g));
  }
  return written;
}

// Copies this rank's experts [first, first + local) of `dst` (tensor `name`) out of every shard
// file that holds some of them.
Status read_expert_tensor(const std::vector<ckpt::SafetensorsFile>& shards, const std::string& name,
                          int64_t first, const TensorView& dst) {
  const int64_t local = dst.dim(0);
  const size_t row_bytes = dst.nbytes() / static_cast<size_t>(std::max<int64_t>(local, 1));
  int64_t filled = 0;
  for (const ckpt::SafetensorsFile& f : shards) {
    auto meta = f.metadata().find("first_expert");
    if (meta == f.metadata().end()) {
      return data_loss_error("expert shard ", f.path(), " has no first_expert metadata");
    }
    const int64_t f_first = std::strtoll(meta->second.c_str(), nullptr, 10);
    MOE_ASSIGN_OR_RETURN(Tensor t, f.read(name));
    const int64_t f_local = t.dim(0);
    std::vector<int64_t> expect = dst.shape().to_vector();
    expect[0] = f_local;
    if (t.shape() != Shape(expect) || t.dtype() != dst.dtype()) {
      return invalid_argument_error("expert tensor '", name, "' in ", f.path(), " is ",
                                    t.view().to_string(), ", expected [", f_local, ", ...] like ",
                                    dst.to_string());
    }
    const int64_t lo = std::max(first, f_first), hi = std::min(first + local, f_first + f_local);
    for (int64_t e = lo; e < hi; ++e) {
      std::memcpy(static_cast<char*>(dst.raw()) + (e - first) * row_bytes,
                  static_cast<const char*>(t.raw()) + (e - f_first) * row_bytes, row_bytes);
      ++filled;
    }
  }
  if (filled != local) {
    return data_loss_error("checkpoint shards hold ", filled, " of the ", local, " experts [",
                           first, ", ", first + local, ") of '", name, "'");
  }
  return Status::OK();
}

// Reads every parameter (and, with an optimizer, its state) into host arenas laid out like the
// device ones, then uploads them (a sharded optimizer state or sharded masters: this rank's chunk
// of them) and refreshes the working copies.
Status load_into(const std::string& dir, const CheckpointManifestInfo& m, TransformerLM* model,
                 Optimizer* optimizer) {
  MOE_ASSIGN_OR_RETURN(ckpt::SafetensorsFile dense,
                       ckpt::SafetensorsFile::open(dir + "/" + kDenseFile));
  std::vector<ckpt::SafetensorsFile> shards, opt_shards;
  for (const CheckpointFileInfo& f : m.files) {
    if (f.kind == CheckpointFileKind::kExpertShard ||
        f.kind == CheckpointFileKind::kOptimizerExpert) {
      MOE_ASSIGN_OR_RETURN(ckpt::SafetensorsFile s,
                           ckpt::SafetensorsFile::open(dir + "/" + f.path));
      (f.kind == CheckpointFileKind::kExpertShard ? shards : opt_shards).push_back(std::move(s));
    }
  }
  ParameterSet& params = model->params();
  Context& ctx = model->context();
  // A kind's parameters as its arena lays them out, without the arena's padding.
  auto host_arena = [&](ParamKind kind) {
    return Tensor::try_empty({params.numel(kind)}, params.master_dtype());
  };
  MOE_ASSIGN_OR_RETURN(Tensor dense_masters, host_arena(ParamKind::kDense));
  MOE_ASSIGN_OR_RETURN(Tensor expert_masters, host_arena(ParamKind::kExpert));
  const Tensor host_masters[2] = {dense_masters, expert_masters};
  auto arena = [](ParamKind kind) { return kind == ParamKind::kDense ? 0 : 1; };
  for (const auto& p : params.all()) {
    const TensorView dst = p->slice_of(host_masters[arena(p->kind)]);
    if (p->kind == ParamKind::kDense) {
      MOE_RETURN_IF_ERROR(dense.read_into(p->name, dst));
    } else {
      MOE_RETURN_IF_ERROR(read_expert_tensor(shards, p->name, p->first_expert, dst));
    }
  }
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    if (params.masters_sharded(kind)) {  // the optimizer knows the chunks' layout
      if (optimizer == nullptr) {
        return failed_precondition_error(
            "the masters are sharded (train.distributed_optimizer): load a checkpoint into them "
            "with their optimizer");
      }
      MOE_RETURN_IF_ERROR(optimizer->load_masters(kind, host_masters[arena(kind)]));
      continue;
    }
    MOE_RETURN_IF_ERROR(ctx.copy(host_masters[arena(kind)],
                                 params.masters(kind).view().rows(0, params.numel(kind))));
  }
  MOE_RETURN_IF_ERROR(params.refresh_working());
  if (optimizer == nullptr) return ctx.synchronize();  // the host arenas are freed on return
  MOE_ASSIGN_OR_RETURN(ckpt::SafetensorsFile opt_dense,
                       ckpt::SafetensorsFile::open(dir + "/" + kOptDenseFile));
  std::vector<Tensor> host_state;  // [slot * 2 + kind]
  for (int slot = 0; slot < optimizer->slots(); ++slot) {
    for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
      MOE_ASSIGN_OR_RETURN(Tensor state, host_arena(kind));
      host_state.push_back(std::move(state));
    }
  }
  for (const auto& s : optimizer->state_tensors()) {
    const TensorView dst = s.param->slice_of(host_state[s.slot * 2 + arena(s.param->kind)]);
    if (s.param->kind == ParamKind::kDense) {
      MOE_RETURN_IF_ERROR(opt_dense.read_into(s.name, dst));
    } else {
      MOE_RETURN_IF_ERROR(read_expert_tensor(opt_shards, s.name, s.param->first_expert, dst));
    }
  }
  for (int slot = 0; slot < optimizer->slots(); ++slot) {
    for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
      MOE_RETURN_IF_ERROR(optimizer->load_state(slot, kind, host_state[slot * 2 + arena(kind)]));
    }
  }
  return ctx.synchronize();
}

}  // namespace

StatusOr<std::string> save_checkpoint(const std::string& run_dir, const TrainingState& st,
                                      comm::Communicator* world, const comm::ProcessGroups* g,
                                      int64_t keep) {
  const int rank = world == nullptr ? 0 : world->rank();
  const int64_t step = st.scheduler->cursor().step;
  const std::string final_dir = run_dir + "/" + ckpt::checkpoint_dir_name(step);
  Status begun = Status::OK();
  if (rank == 0) begun = io::AtomicDirectory::begin(final_dir).status();
  MOE_RETURN_IF_ERROR(agree(world, begun));
  io::AtomicDirectory dir = io::AtomicDirectory::attach(final_dir);
  MOE_RETURN_IF_ERROR(agree(world, write_files(dir.path(), st, g, rank)));

  Status committed = Status::OK();
  if (rank == 0) {
    committed = [&]() -> Status {
      CheckpointManifestInfo m;
      m.step = step;
      m.updates = *st.updates;
      m.created_unix_time = io::unix_time_seconds();
      m.config_text = st.cfg->text;
      m.seed = st.cfg->train.seed;
      m.data_epoch = st.scheduler->cursor().epoch;
      m.data_position = st.scheduler->cursor().position;
      m.world_size = world == nullptr ? 1 : world->world_size();
      m.ep_size = ep_size_of(g);
      m.dp_size = g == nullptr ? 1 : g->dp_size;
      m.vocab_fingerprint = st.tokenizer->fingerprint();
      m.dtype = dtype_name(st.model->params().master_dtype());
      m.run_id = st.run_id;
      m.branch = st.branch.empty() ? st.run_id : st.branch;
      m.parent = st.parent;
      m.lineage = st.lineage;
      m.extra = st.extra;
      std::vector<std::pair<std::string, CheckpointFileKind>> common = {
          {kDenseFile, CheckpointFileKind::kDense},
          {kOptDenseFile, CheckpointFileKind::kOptimizerDense}};
      for (const std::string& f : st.tokenizer->files()) {  // vocab.txt, or tokenizer.model + .json
        common.emplace_back(f, CheckpointFileKind::kOther);
      }
      for (const auto& [name, kind] : common) {
        MOE_ASSIGN_OR_RETURN(CheckpointFileInfo f,
                             ckpt::describe_file(dir.path(), name, kind, 0, 1));
        m.files.push_back(f);
      }
      for (int r = 0; r < m.ep_size; ++r) {
        MOE_ASSIGN_OR_RETURN(CheckpointFileInfo e,
                             ckpt::describe_file(dir.path(), expert_file("experts", r, m.ep_size),
                                                 CheckpointFileKind::kExpertShard, r, m.ep_size));
        MOE_ASSIGN_OR_RETURN(
            CheckpointFileInfo o,
            ckpt::describe_file(dir.path(), expert_file("optimizer-experts", r, m.ep_size),
                                CheckpointFileKind::kOptimizerExpert, r, m.ep_size));
        m.files.push_back(e);
        m.files.push_back(o);
      }
      MOE_RETURN_IF_ERROR(ckpt::write_manifest(dir.path(), m));
      MOE_RETURN_IF_ERROR(ckpt::commit_checkpoint(dir, st.run_id));
      std::vector<std::string> live = st.lineage;
      live.push_back(m.branch);
      return ckpt::prune_checkpoints(run_dir, keep, st.run_id, live);
    }();
  }
  MOE_RETURN_IF_ERROR(agree(world, committed));
  return final_dir;
}

Status restore_checkpoint(const std::string& dir, const TrainingState& st,
                          comm::Communicator* world, const comm::ProcessGroups* g) {
  Status local = [&]() -> Status {
    MOE_ASSIGN_OR_RETURN(CheckpointManifestInfo m, ckpt::read_manifest(dir));
    MOE_RETURN_IF_ERROR(ckpt::verify_checkpoint_dir(dir, m));
    if (m.vocab_fingerprint != st.tokenizer->fingerprint()) {
      return failed_precondition_error(
          "checkpoint ", dir, " was trained with tokenizer fingerprint 0x", std::hex,
          m.vocab_fingerprint, ", but this run's ", st.tokenizer->describe(), " from ",
          st.vocab_source, " has 0x", st.tokenizer->fingerprint(), std::dec,
          " (the training corpus, the tokenizer or its options changed)");
    }
    if (m.dtype != dtype_name(st.model->params().master_dtype())) {
      return failed_precondition_error("checkpoint ", dir, " holds ", m.dtype,
                                       " parameters, this run ",
                                       dtype_name(st.model->params().master_dtype()));
    }
    MOE_RETURN_IF_ERROR(load_into(dir, m, st.model, st.optimizer));
    data::DataCursor cursor;
    cursor.epoch = m.data_epoch;
    cursor.position = m.data_position;
    cursor.step = m.step;
    MOE_RETURN_IF_ERROR(st.scheduler->restore(cursor));
    *st.updates = m.updates;
    return Status::OK();
  }();
  return agree(world, local);
}

Status load_parameters(const std::string& dir, TransformerLM* model,
                       const comm::ProcessGroups* groups) {
  MOE_ASSIGN_OR_RETURN(CheckpointManifestInfo m, ckpt::read_manifest(dir));
  MOE_RETURN_IF_ERROR(ckpt::verify_checkpoint_dir(dir, m));
  return load_into(dir, m, model, nullptr);
}

}  // namespace moe
