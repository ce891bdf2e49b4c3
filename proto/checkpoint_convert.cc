#include "proto/checkpoint_convert.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "io/file_util.h"
#include "proto/checkpoint.pb.h"

namespace moe {
namespace {

// The same message gives the same bytes (map entries sorted by key), so checkpoints of
// identical runs are byte-identical.
std::string deterministic_bytes(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace

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
  m.set_run_id(c.run_id);
  m.set_branch(c.branch);
  m.set_parent(c.parent);
  for (const std::string& b : c.lineage) m.add_lineage(b);
  momoe::ManifestFile file;
  file.set_manifest(deterministic_bytes(m));
  file.set_crc32(io::crc32_of(file.manifest()));
  return deterministic_bytes(file);
}

StatusOr<CheckpointManifestInfo> parse_manifest(const std::string& bytes, const std::string& path) {
  momoe::ManifestFile file;
  momoe::CheckpointManifest m;
  // Format 2 is a ManifestFile; a format-1 file is a bare CheckpointManifest, whose fields have
  // other numbers, so it parses as a ManifestFile with no `manifest`.
  if (file.ParseFromString(bytes) && !file.manifest().empty()) {
    if (io::crc32_of(file.manifest()) != file.crc32()) {
      return data_loss_error(
          "checkpoint manifest ", path, " is corrupted (checksum mismatch: crc32 ",
          io::hex32(io::crc32_of(file.manifest())), ", recorded ", io::hex32(file.crc32()), ")");
    }
    if (!m.ParseFromString(file.manifest()) ||
        m.format_version() != CheckpointManifestInfo::kFormatVersion) {
      return data_loss_error("checkpoint manifest ", path,
                             " is corrupted (its checksum matches, but "
                             "it does not hold a format-",
                             CheckpointManifestInfo::kFormatVersion, " manifest)");
    }
  } else {
    if (!m.ParseFromString(bytes)) {
      return data_loss_error("checkpoint manifest ", path, " is corrupted (it does not parse)");
    }
    if (m.format_version() != 1) {
      return data_loss_error("checkpoint manifest ", path, " is corrupted or of an unknown format ",
                             "(format version ", m.format_version(), "; this build reads 1 and ",
                             CheckpointManifestInfo::kFormatVersion, ")");
    }
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
      return data_loss_error("checkpoint manifest ", path, ": file ", p.path(),
                             " has unknown kind ", static_cast<int>(p.kind()));
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
  c.run_id = m.run_id();
  c.branch = m.branch().empty() ? m.run_id() : m.branch();
  c.parent = m.parent();
  c.lineage.assign(m.lineage().begin(), m.lineage().end());
  return c;
}

}  // namespace moe
