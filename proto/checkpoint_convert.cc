#include "proto/checkpoint_convert.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "proto/checkpoint.pb.h"

namespace moe {

std::string serialize_manifest(const CheckpointManifestInfo& c) {
  momoe::CheckpointManifest m;
  m.set_format_version(c.format_version);
  m.set_step(c.step);
  m.set_updates(c.updates);
  m.set_created_unix_time(c.created_unix_time);
  m.set_config_text(c.config_text);
  for (const CheckpointFileInfo& f : c.files) {
    momoe::CheckpointFile* p = m.add_files();
    p->set_path(f.path);
    p->set_size_bytes(f.size_bytes);
    p->set_crc32(f.crc32);
    p->set_kind(static_cast<momoe::CheckpointFile::Kind>(static_cast<int>(f.kind) + 1));
    p->set_ep_rank(f.ep_rank);
    p->set_ep_size(f.ep_size);
  }
  m.set_seed(c.seed);
  m.set_data_epoch(c.data_epoch);
  m.set_data_position(c.data_position);
  m.set_world_size(c.world_size);
  m.set_ep_size(c.ep_size);
  m.set_dp_size(c.dp_size);
  m.set_vocab_fingerprint(c.vocab_fingerprint);
  m.set_dtype(c.dtype);
  for (const auto& [k, v] : c.extra) (*m.mutable_extra())[k] = v;
  // Deterministic: the same manifest gives the same bytes (map entries sorted by key), so
  // checkpoints of identical runs are byte-identical.
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

StatusOr<CheckpointManifestInfo> parse_manifest(const std::string& bytes, const std::string& path) {
  momoe::CheckpointManifest m;
  if (!m.ParseFromString(bytes)) return data_loss_error("checkpoint manifest ", path, " does not parse");
  if (m.format_version() != CheckpointManifestInfo::kFormatVersion) {
    return failed_precondition_error("checkpoint manifest ", path, " has format version ",
                                     m.format_version(), "; this build reads version ",
                                     CheckpointManifestInfo::kFormatVersion);
  }
  CheckpointManifestInfo c;
  c.format_version = m.format_version();
  c.step = m.step();
  c.updates = m.updates();
  c.created_unix_time = m.created_unix_time();
  c.config_text = m.config_text();
  for (const momoe::CheckpointFile& p : m.files()) {
    if (p.kind() == momoe::CheckpointFile::KIND_UNSPECIFIED) {
      return data_loss_error("checkpoint manifest ", path, ": file ", p.path(), " has no kind");
    }
    if (!momoe::CheckpointFile::Kind_IsValid(p.kind())) {  // proto3 keeps unknown enum values
      return data_loss_error("checkpoint manifest ", path, ": file ", p.path(), " has unknown kind ",
                             static_cast<int>(p.kind()));
    }
    CheckpointFileInfo f;
    f.path = p.path();
    f.size_bytes = p.size_bytes();
    f.crc32 = p.crc32();
    f.kind = static_cast<CheckpointFileKind>(static_cast<int>(p.kind()) - 1);
    f.ep_rank = p.ep_rank();
    f.ep_size = p.ep_size();
    c.files.push_back(f);
  }
  c.seed = m.seed();
  c.data_epoch = m.data_epoch();
  c.data_position = m.data_position();
  c.world_size = m.world_size();
  c.ep_size = m.ep_size();
  c.dp_size = m.dp_size();
  c.vocab_fingerprint = m.vocab_fingerprint();
  c.dtype = m.dtype();
  c.extra.insert(m.extra().begin(), m.extra().end());
  return c;
}

}  // namespace moe
