#include "proto/stats_convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "base/check.h"
#include "io/file_util.h"
#include "proto/stats.pb.h"
#include "types/step_stats_json.h"

namespace moe {
namespace {

void router_to_proto(const RouterStatsInfo& s, momoe::RouterStats* m) {
  m->set_block(s.block);
  m->set_moe_index(s.moe_index);
  m->set_tokens(s.tokens);
  m->set_slots(s.slots);
  for (int64_t v : s.expert_load) m->add_expert_load(v);
  m->set_dropped_slots(s.dropped_slots);
  m->set_fully_dropped_tokens(s.fully_dropped_tokens);
  m->set_balance_loss_sum(s.balance_loss_sum);
  m->set_z_loss_sum(s.z_loss_sum);
  m->set_seq_balance_loss_sum(s.seq_balance_loss_sum);
  m->set_entropy_sum(s.entropy_sum);
  m->set_output_norm_sum(s.output_norm_sum);
  m->set_state_norm_sum(s.state_norm_sum);
  m->set_top1_gate_sum(s.top1_gate_sum);
  for (int64_t v : s.cluster_size) m->add_cluster_size(v);
  for (double v : s.cluster_dispersion) m->add_cluster_dispersion(v);
  m->set_tiny_clusters(s.tiny_clusters);
  m->set_metric_min(s.metric_min);
  m->set_metric_max(s.metric_max);
  m->set_metric_mean(s.metric_mean);
  m->set_single_expert_tokens(s.single_expert_tokens);
  m->set_non_argmax_tokens(s.non_argmax_tokens);
  m->set_halved_tokens(s.halved_tokens);
  m->set_unmasked_sum(s.unmasked_sum);
  m->set_dispatch_rows_sent(s.dispatch_rows_sent);
  m->set_dispatch_rows_undeduplicated(s.dispatch_rows_undeduplicated);
  m->set_dispatch_row_bytes(s.dispatch_row_bytes);
  m->set_dropped_fraction(s.dropped_fraction);
  m->set_max_load(s.max_load);
  m->set_load_balance_std(s.load_balance_std);
  m->set_dead_experts(s.dead_experts);
  m->set_balance_loss(s.balance_loss);
  m->set_z_loss(s.z_loss);
  m->set_seq_balance_loss(s.seq_balance_loss);
  for (double v : s.score_bias) m->add_score_bias(v);
  m->set_mean_entropy(s.mean_entropy);
  m->set_mean_output_norm(s.mean_output_norm);
  m->set_mean_state_norm(s.mean_state_norm);
  m->set_probe_flip_rate(s.probe_flip_rate);
  m->set_dispatch_saved_fraction(s.dispatch_saved_fraction);
  m->set_ranks(s.ranks);
  for (double v : s.mean_cluster_dispersion) m->add_mean_cluster_dispersion(v);
}

RouterStatsInfo router_from_proto(const momoe::RouterStats& m) {
  RouterStatsInfo s;
  s.block = m.block();
  s.moe_index = m.moe_index();
  s.tokens = m.tokens();
  s.slots = m.slots();
  s.expert_load.assign(m.expert_load().begin(), m.expert_load().end());
  s.dropped_slots = m.dropped_slots();
  s.fully_dropped_tokens = m.fully_dropped_tokens();
  s.balance_loss_sum = m.balance_loss_sum();
  s.z_loss_sum = m.z_loss_sum();
  s.seq_balance_loss_sum = m.seq_balance_loss_sum();
  s.entropy_sum = m.entropy_sum();
  s.output_norm_sum = m.output_norm_sum();
  s.state_norm_sum = m.state_norm_sum();
  s.top1_gate_sum = m.top1_gate_sum();
  s.cluster_size.assign(m.cluster_size().begin(), m.cluster_size().end());
  s.cluster_dispersion.assign(m.cluster_dispersion().begin(), m.cluster_dispersion().end());
  s.tiny_clusters = m.tiny_clusters();
  s.metric_min = m.metric_min();
  s.metric_max = m.metric_max();
  s.metric_mean = m.metric_mean();
  s.single_expert_tokens = m.single_expert_tokens();
  s.non_argmax_tokens = m.non_argmax_tokens();
  s.halved_tokens = m.halved_tokens();
  s.unmasked_sum = m.unmasked_sum();
  s.dispatch_rows_sent = m.dispatch_rows_sent();
  s.dispatch_rows_undeduplicated = m.dispatch_rows_undeduplicated();
  s.dispatch_row_bytes = m.dispatch_row_bytes();
  s.dropped_fraction = m.dropped_fraction();
  s.max_load = m.max_load();
  s.load_balance_std = m.load_balance_std();
  s.dead_experts = m.dead_experts();
  s.balance_loss = m.balance_loss();
  s.z_loss = m.z_loss();
  s.seq_balance_loss = m.seq_balance_loss();
  s.score_bias.assign(m.score_bias().begin(), m.score_bias().end());
  s.mean_entropy = m.mean_entropy();
  s.mean_output_norm = m.mean_output_norm();
  s.mean_state_norm = m.mean_state_norm();
  s.probe_flip_rate = m.probe_flip_rate();
  s.dispatch_saved_fraction = m.dispatch_saved_fraction();
  s.ranks = m.ranks();
  s.mean_cluster_dispersion.assign(m.mean_cluster_dispersion().begin(),
                                   m.mean_cluster_dispersion().end());
  return s;
}

// Returns false when the buffer ends inside the varint.
bool get_varint(const std::string& buf, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= buf.size()) return false;
    const uint8_t byte = static_cast<uint8_t>(buf[(*pos)++]);
    *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

}  // namespace

std::string serialize_step_stats(const StepStatsInfo& s) {
  momoe::StepStats m;
  m.set_step(s.step);
  m.set_steps_done_numbering(true);
  m.set_rank(s.rank);
  m.set_loss(s.loss);
  m.set_aux_loss(s.aux_loss);
  m.set_learning_rate(s.learning_rate);
  m.set_grad_norm(s.grad_norm);
  m.set_tokens(s.tokens);
  m.set_step_seconds(s.step_seconds);
  m.set_tokens_per_second(s.tokens_per_second);
  m.set_skipped(s.skipped);
  for (const RouterStatsInfo& l : s.layers) router_to_proto(l, m.add_layers());
  for (const std::string& a : s.anomalies) m.add_anomalies(a);
  if (s.valid_ppl) m.set_valid_ppl(*s.valid_ppl);
  if (s.test_ppl) m.set_test_ppl(*s.test_ppl);
  if (s.attacked_valid_ppl) m.set_attacked_valid_ppl(*s.attacked_valid_ppl);
  if (s.attacked_test_ppl) m.set_attacked_test_ppl(*s.attacked_test_ppl);
  if (s.attack_rate) m.set_attack_rate(*s.attack_rate);
  if (s.rollback_to) m.set_rollback_to(*s.rollback_to);
  if (s.interrupted) m.set_interrupted(true);
  if (s.valid_word_ppl) m.set_valid_word_ppl(*s.valid_word_ppl);
  if (s.test_word_ppl) m.set_test_word_ppl(*s.test_word_ppl);
  if (s.valid_bits_per_byte) m.set_valid_bits_per_byte(*s.valid_bits_per_byte);
  if (s.test_bits_per_byte) m.set_test_bits_per_byte(*s.test_bits_per_byte);
  if (s.valid_unknown_fraction) m.set_valid_unknown_fraction(*s.valid_unknown_fraction);
  if (s.test_unknown_fraction) m.set_test_unknown_fraction(*s.test_unknown_fraction);
  if (s.eval_sequences) m.set_eval_sequences(*s.eval_sequences);
  if (s.phases) {
    const PhaseSecondsArray& p = *s.phases;
    momoe::PhaseSeconds* out = m.mutable_phases();
    out->set_data(p[static_cast<int>(Phase::kData)]);
    out->set_forward(p[static_cast<int>(Phase::kForward)]);
    out->set_backward(p[static_cast<int>(Phase::kBackward)]);
    out->set_exchange(p[static_cast<int>(Phase::kExchange)]);
    out->set_grad_sync(p[static_cast<int>(Phase::kGradSync)]);
    out->set_optimizer(p[static_cast<int>(Phase::kOptimizer)]);
  }
  if (s.eval_seconds) m.set_eval_seconds(*s.eval_seconds);
  if (s.peak_tensor_bytes) m.set_peak_tensor_bytes(*s.peak_tensor_bytes);
  if (s.peak_rss_bytes) m.set_peak_rss_bytes(*s.peak_rss_bytes);
  return m.SerializeAsString();
}

StatusOr<StepStatsInfo> parse_step_stats(const std::string& bytes) {
  momoe::StepStats m;
  if (!m.ParseFromString(bytes)) return data_loss_error("malformed StepStats message");
  StepStatsInfo s;
  s.step = m.step();
  s.rank = m.rank();
  s.loss = m.loss();
  s.aux_loss = m.aux_loss();
  s.learning_rate = m.learning_rate();
  s.grad_norm = m.grad_norm();
  s.tokens = m.tokens();
  s.step_seconds = m.step_seconds();
  s.tokens_per_second = m.tokens_per_second();
  s.skipped = m.skipped();
  for (const momoe::RouterStats& l : m.layers()) s.layers.push_back(router_from_proto(l));
  s.anomalies.assign(m.anomalies().begin(), m.anomalies().end());
  if (m.has_valid_ppl()) s.valid_ppl = m.valid_ppl();
  if (m.has_test_ppl()) s.test_ppl = m.test_ppl();
  if (m.has_attacked_valid_ppl()) s.attacked_valid_ppl = m.attacked_valid_ppl();
  if (m.has_attacked_test_ppl()) s.attacked_test_ppl = m.attacked_test_ppl();
  if (m.has_attack_rate()) s.attack_rate = m.attack_rate();
  if (m.has_rollback_to()) s.rollback_to = m.rollback_to();
  s.interrupted = m.interrupted();
  if (m.has_valid_word_ppl()) s.valid_word_ppl = m.valid_word_ppl();
  if (m.has_test_word_ppl()) s.test_word_ppl = m.test_word_ppl();
  if (m.has_valid_bits_per_byte()) s.valid_bits_per_byte = m.valid_bits_per_byte();
  if (m.has_test_bits_per_byte()) s.test_bits_per_byte = m.test_bits_per_byte();
  if (m.has_valid_unknown_fraction()) s.valid_unknown_fraction = m.valid_unknown_fraction();
  if (m.has_test_unknown_fraction()) s.test_unknown_fraction = m.test_unknown_fraction();
  if (m.has_eval_sequences()) s.eval_sequences = m.eval_sequences();
  if (m.has_phases()) {
    const momoe::PhaseSeconds& in = m.phases();
    PhaseSecondsArray p{};
    p[static_cast<int>(Phase::kData)] = in.data();
    p[static_cast<int>(Phase::kForward)] = in.forward();
    p[static_cast<int>(Phase::kBackward)] = in.backward();
    p[static_cast<int>(Phase::kExchange)] = in.exchange();
    p[static_cast<int>(Phase::kGradSync)] = in.grad_sync();
    p[static_cast<int>(Phase::kOptimizer)] = in.optimizer();
    s.phases = p;
  }
  if (m.has_eval_seconds()) s.eval_seconds = m.eval_seconds();
  if (m.has_peak_tensor_bytes()) s.peak_tensor_bytes = m.peak_tensor_bytes();
  if (m.has_peak_rss_bytes()) s.peak_rss_bytes = m.peak_rss_bytes();
  // An older file's training record holds the step's 0-based index: one numbering everywhere.
  if (!m.steps_done_numbering() && is_training_step(s)) s.step += 1;
  return s;
}

std::vector<StepStatsInfo> live_records(std::vector<StepStatsInfo> records) {
  std::vector<StepStatsInfo> out;
  for (StepStatsInfo& r : records) {
    if (r.rollback_to) {
      const int64_t to = *r.rollback_to;
      out.erase(std::remove_if(out.begin(), out.end(),
                               [&](const StepStatsInfo& s) { return s.step > to; }),
                out.end());
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Format 2 framing (see stats_convert.h): magic, body length, body CRC, header CRC, body.
constexpr char kMagic[4] = {'\x89', 'M', 'S', 'R'};
constexpr size_t kHeaderBytes = 16;

uint32_t get_u32(const std::string& buf, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(buf[at + i]);
  return v;
}

void put_u32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool has_magic(const std::string& buf, size_t at) {
  return buf.size() >= at + 4 && std::memcmp(buf.data() + at, kMagic, 4) == 0;
}

// A whole, intact header at `at` (magic and header CRC), whatever its body.
bool header_at(const std::string& buf, size_t at, uint32_t* length) {
  if (buf.size() < at + kHeaderBytes || !has_magic(buf, at)) return false;
  if (io::crc32_of(buf.data() + at, 12) != get_u32(buf, at + 12)) return false;
  *length = get_u32(buf, at + 4);
  return true;
}

std::string frame(const std::string& body) {
  std::string record(kMagic, 4);
  put_u32(static_cast<uint32_t>(body.size()), &record);
  put_u32(io::crc32_of(body), &record);
  put_u32(io::crc32_of(record.data(), 12), &record);
  return record + body;
}

// Format 1 (before record checksums): varint length, message. Read only.
StatsFileContents read_format1(const std::string& buf, size_t pos) {
  StatsFileContents out;
  out.format = 1;
  out.bytes_read = static_cast<int64_t>(pos);
  while (pos < buf.size()) {
    size_t p = pos;
    uint64_t len = 0;
    if (!get_varint(buf, &p, &len) || len > buf.size() - p) {
      out.truncated_tail = true;
      break;
    }
    StatusOr<StepStatsInfo> s = parse_step_stats(buf.substr(p, len));
    if (!s.ok()) {
      out.damaged_at = static_cast<int64_t>(pos);
      out.damaged.push_back({static_cast<int64_t>(pos), static_cast<int64_t>(buf.size() - pos)});
      break;
    }
    out.steps.push_back(std::move(s).value());
    pos = p + len;
    out.bytes_read = static_cast<int64_t>(pos);
  }
  return out;
}

StatsFileContents read_format2(const std::string& buf, size_t pos) {
  StatsFileContents out;
  out.format = 2;
  out.bytes_read = static_cast<int64_t>(pos);
  auto damage = [&](size_t from, size_t to) {
    if (out.damaged_at < 0) out.damaged_at = static_cast<int64_t>(from);
    out.damaged.push_back({static_cast<int64_t>(from), static_cast<int64_t>(to - from)});
  };
  while (pos < buf.size()) {
    uint32_t len = 0;
    if (header_at(buf, pos, &len)) {
      if (len > buf.size() - pos - kHeaderBytes) {  // a record cut off by the end of the file
        out.truncated_tail = true;
        break;
      }
      const std::string body = buf.substr(pos + kHeaderBytes, len);
      StatusOr<StepStatsInfo> s = io::crc32_of(body) == get_u32(buf, pos + 8)
                                      ? parse_step_stats(body)
                                      : data_loss_error("record checksum");
      if (s.ok()) {
        out.steps.push_back(std::move(s).value());
      } else {
        damage(pos, pos + kHeaderBytes + len);  // the header is intact: so is the length
      }
      pos += kHeaderBytes + len;
      out.bytes_read = static_cast<int64_t>(pos);
      continue;
    }
    // No intact header here: resynchronise at the next one. What lies before it is damage; a
    // short rest that could be the start of a record is a torn tail.
    size_t next = pos + 1;
    uint32_t ignored = 0;
    while (next < buf.size() && !header_at(buf, next, &ignored)) ++next;
    if (next >= buf.size()) {
      const size_t rest = buf.size() - pos;
      const bool prefix = rest < kHeaderBytes &&
                          std::memcmp(buf.data() + pos, kMagic, std::min<size_t>(rest, 4)) == 0;
      if (prefix) {
        out.truncated_tail = true;
      } else {
        damage(pos, buf.size());
        out.bytes_read = static_cast<int64_t>(buf.size());
      }
      break;
    }
    damage(pos, next);
    pos = next;
    out.bytes_read = static_cast<int64_t>(pos);
  }
  return out;
}

}  // namespace

StatsFileWriter::~StatsFileWriter() { close(); }

void StatsFileWriter::note_evaluation(const StepStatsInfo& s) {
  if (s.rollback_to) {  // a marker: the evaluations after its step are superseded
    for (auto it = evaluations_.begin(); it != evaluations_.end();) {
      it = it->first > *s.rollback_to ? evaluations_.erase(it) : std::next(it);
    }
  } else if (!is_training_step(s) && s.eval_sequences.has_value()) {
    evaluations_.insert({s.step, *s.eval_sequences});
  }
}

bool StatsFileWriter::has_evaluation(int64_t step, int64_t eval_sequences) const {
  return evaluations_.count({step, eval_sequences}) > 0;
}

Status StatsFileWriter::open(const std::string& path, std::string* note) {
  close();
  note->clear();
  path_ = path;
  last_step_ = -1;
  evaluations_.clear();
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    MOE_ASSIGN_OR_RETURN(StatsFileContents c, read_stats_file(path));
    for (const StepStatsInfo& s : live_records(c.steps)) {
      last_step_ = std::max(last_step_, s.step);
      note_evaluation(s);
    }
    if (c.format == 1) {
      // An older run's file: its whole records are rewritten in the checksummed format; the
      // original is kept beside it.
      const std::string kept = str_cat(path, ".format1-", io::unix_time_seconds());
      std::string converted;
      for (const StepStatsInfo& s : c.steps) converted += frame(serialize_step_stats(s));
      MOE_RETURN_IF_ERROR(io::rename_durable(path, kept));
      MOE_RETURN_IF_ERROR(io::write_file_atomic(path, converted));
      *note = str_cat(path, ": converted ", c.steps.size(),
                      " records to the checksummed format (the original is kept as ", kept, ")");
    } else if (c.truncated_tail) {
      // Only a torn tail (a record cut off by a kill or a full disk) is ever cut, and what is
      // cut is kept aside. Damaged records inside the file stay: readers skip them.
      MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
      const std::string torn = bytes.substr(static_cast<size_t>(c.bytes_read));
      const std::string kept = str_cat(path, ".torn-", io::unix_time_seconds());
      MOE_RETURN_IF_ERROR(io::write_file_atomic(kept, torn));
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      const bool cut = fd >= 0 && ::ftruncate(fd, c.bytes_read) == 0 && ::fsync(fd) == 0;
      if (fd >= 0) ::close(fd);
      if (!cut) {
        return internal_error("cannot truncate the torn end of ", path, ": ", std::strerror(errno));
      }
      *note = str_cat(path, ": removed a torn last record (", torn.size(), " bytes from byte ",
                      c.bytes_read, ", left by an interrupted run; kept as ", kept, "); ",
                      c.steps.size(), " whole records kept");
    }
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return not_found_error("cannot open stats file ", path, ": ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    return internal_error("cannot stat ", path, ": ", std::strerror(errno));
  size_ = st.st_size;
  if (::lseek(fd_, size_, SEEK_SET) < 0) {
    return internal_error("cannot seek in ", path, ": ", std::strerror(errno));
  }
  return Status::OK();
}

Status StatsFileWriter::append(const StepStatsInfo& stats) {
  if (fd_ < 0) return failed_precondition_error("stats file is not open");
  const std::string record = frame(serialize_step_stats(stats));
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t w = ::write(fd_, record.data() + done, record.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      // Cut the partial record back so that the next append starts on a record boundary.
      if (::ftruncate(fd_, size_) != 0 || ::lseek(fd_, size_, SEEK_SET) < 0) {
        ::close(fd_);
        fd_ = -1;
      }
      return internal_error("writing stats file ", path_, " failed: ", std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  size_ += static_cast<int64_t>(record.size());
  note_evaluation(stats);
  return Status::OK();
}

Status StatsFileWriter::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0) {
    return internal_error("fsync of ", path_, " failed: ", std::strerror(errno));
  }
  return Status::OK();
}

void StatsFileWriter::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

StatusOr<StatsFileContents> read_stats_file(const std::string& path, int64_t offset) {
  StatusOr<std::string> bytes = io::read_file(path);
  if (!bytes.ok()) {
    return Status(bytes.status().code(), str_cat("stats file: ", bytes.status().message()));
  }
  const std::string& buf = *bytes;
  const size_t pos = std::min(static_cast<size_t>(std::max<int64_t>(0, offset)), buf.size());
  // The format is the first record's: checksummed records start with the magic bytes.
  const bool format2 = buf.empty() || has_magic(buf, 0) ||
                       (buf.size() < 4 && std::memcmp(buf.data(), kMagic, buf.size()) == 0);
  StatsFileContents out = format2 ? read_format2(buf, pos) : read_format1(buf, pos);
  // Not starting with the magic and not a single format-1 record: not a stats file.
  if (!buf.empty() && pos == 0 && out.format == 1 && out.steps.empty()) {
    return invalid_argument_error(path,
                                  " is not a momoe statistics file (no record at its "
                                  "start; ",
                                  buf.size(), " bytes)");
  }
  return out;
}

}  // namespace moe
