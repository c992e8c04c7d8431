#include "checkpoint_file.hpp"

#include <memcomm/trace/trace_format.hpp>

#include <cstring>
#include <sstream>
#include <stdexcept>

namespace memcomm::train {

namespace {

// Note [Checkpoint checksum]
// LibTorch reads its archive without checking the zip's CRCs, so a checkpoint with a few flipped bytes
// resumed with NaN weights, and exit 0. A checkpoint is therefore the archive behind a header: kMagic,
// the archive's length and prof::trace_hash (XXH3, the .mct chunks' checksum) of its bytes. Resume
// refuses a file whose length or checksum disagree, as corrupt (exit 1), before LibTorch reads it. A
// bare archive (written before the header) still loads. The archive is streamed to the file as
// LibTorch writes it, hashed on the way, and the header is written last into the space kept for it:
// held in memory first, a checkpoint cost three to four times its size beside the model.
// The second version of the header adds the step and the rank that wrote the file: resume reads them
// from the header alone (Note [A save cut short] in trainer.cpp), and refuses another rank's file.
constexpr char kMagicV1[8] = {'M', 'C', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kMagic[8] = {'M', 'C', 'C', 'K', 'P', 'T', '0', '2'};
constexpr size_t kHeaderV1Bytes = sizeof kMagic + 2 * sizeof(uint64_t);
static_assert(kCheckpointHeaderBytes == sizeof kMagic + 4 * sizeof(uint64_t));

}  // namespace

std::string checkpoint_header(uint64_t size, uint64_t hash, int64_t step, int rank) {
  const uint64_t fields[4] = {size, hash, uint64_t(step), uint64_t(int64_t(rank))};
  std::string out(kMagic, sizeof kMagic);
  out.append(reinterpret_cast<const char*>(fields), sizeof fields);
  return out;
}

CheckpointHeader parse_checkpoint_header(const std::string& path, std::string_view bytes) {
  CheckpointHeader h;
  const bool v1 = bytes.size() >= sizeof kMagicV1 && std::memcmp(bytes.data(), kMagicV1, sizeof kMagicV1) == 0;
  const bool v2 = bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0;
  if (!v1 && !v2) return h;
  h.bytes = v2 ? kCheckpointHeaderBytes : kHeaderV1Bytes;
  if (bytes.size() < h.bytes)
    throw std::runtime_error("checkpoint " + path + " is corrupt: " + std::to_string(bytes.size()) +
                             " bytes, shorter than its header (cut short?)");
  uint64_t fields[4] = {0, 0, uint64_t(-1), uint64_t(-1)};
  std::memcpy(fields, bytes.data() + sizeof kMagic, h.bytes - sizeof kMagic);
  h.size = fields[0];
  h.hash = fields[1];
  h.step = int64_t(fields[2]);
  h.rank = int64_t(fields[3]);
  return h;
}

std::string_view checkpoint_archive(const std::string& path, std::string_view bytes, const CheckpointHeader& h) {
  if (h.bytes == 0) return bytes;  // bare
  if (h.size != bytes.size() - h.bytes)
    throw std::runtime_error("checkpoint " + path + " is corrupt: " + std::to_string(bytes.size()) +
                             " bytes, not the length its header gives (cut short?)");
  const std::string_view archive = bytes.substr(h.bytes);
  if (prof::trace_hash(archive.data(), archive.size()) != h.hash)
    throw std::runtime_error("checkpoint " + path + " is corrupt: its checksum does not match its contents");
  return archive;
}

std::string encode_fingerprint(const Fingerprint& f) {
  std::string s;
  for (const auto& [k, v] : f) s += k + "=" + v + "\n";
  return s;
}

Fingerprint decode_fingerprint(const std::string& text) {
  Fingerprint f;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) f.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return f;
}

}  // namespace memcomm::train
