#include "gym_remote/protocol.hpp"

#include <cstring>
#include <nlohmann/json.hpp>

namespace gym_remote {

namespace {

template <typename T>
void Put(std::string* out, std::size_t offset, T value) {  // little-endian hosts only (x86-64, aarch64)
  std::memcpy(&(*out)[offset], &value, sizeof(T));
}

template <typename T>
T Get(std::string_view frame, std::size_t offset) {
  T value;
  std::memcpy(&value, frame.data() + offset, sizeof(T));
  return value;
}

bool KnownKind(std::uint8_t kind) {
  switch (kind) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9:
    case 10: case 11: case 12: case 13: case 20: case 21: case 22: return true;
    default: return false;
  }
}

Status Malformed(const std::string& reason) { return Status::Error(StatusCode::kProtocolError, reason); }

}  // namespace

std::string KindName(std::uint8_t kind) {
  switch (kind) {
    case 1: return "HELLO";
    case 2: return "WELCOME";
    case 3: return "REFUSE";
    case 4: return "BYE";
    case 5: return "CLOSE";
    case 6: return "PING";
    case 7: return "EVICT";
    case 8: return "STATUS";
    case 9: return "STATUS_REPORT";
    case 10: return "RESET";
    case 11: return "STEP";
    case 12: return "CALL";
    case 13: return "SET_ATTR";
    case 20: return "RESULT";
    case 21: return "CALL_RESULT";
    case 22: return "ERROR";
    default: return "kind " + std::to_string(kind);
  }
}

std::string PackHeader(MessageKind kind, std::uint64_t seq, std::uint16_t count, std::uint16_t flags) {
  std::string frame(kHeaderSize, '\0');
  frame[0] = 'G';
  frame[1] = 'R';
  frame[2] = static_cast<char>(kProtocolVersion);
  frame[3] = static_cast<char>(kind);
  Put(&frame, 4, flags);
  Put(&frame, 6, count);
  Put(&frame, 8, seq);
  return frame;
}

Status ParseHeader(std::string_view frame, Header* header) {
  if (frame.size() < kHeaderSize) {
    return Malformed("malformed message: header frame of " + std::to_string(frame.size()) +
                     " bytes, expected at least 16");
  }
  if (frame[0] != 'G' || frame[1] != 'R') return Malformed("malformed message: header does not start with 'GR'");
  header->version = static_cast<std::uint8_t>(frame[2]);
  header->kind = static_cast<std::uint8_t>(frame[3]);
  header->flags = Get<std::uint16_t>(frame, 4);
  header->count = Get<std::uint16_t>(frame, 6);
  header->seq = Get<std::uint64_t>(frame, 8);
  if (header->version == kProtocolVersion && !KnownKind(header->kind)) {
    return Malformed("malformed message: unknown message kind " + std::to_string(header->kind));
  }
  return Status::Ok();
}

Status ParseIndexFrame(std::string_view frame, std::uint16_t count, std::size_t hosted,
                       std::vector<std::size_t>* indexes) {
  if (count < 1) {
    return Malformed("malformed index frame: a command with FLAG_SUBSET must select at least one env");
  }
  if (frame.size() != 2u * count) {
    return Malformed("malformed index frame: " + std::to_string(frame.size()) + " bytes, expected " +
                     std::to_string(2u * count));
  }
  indexes->clear();
  std::vector<bool> seen(hosted, false);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t index = Get<std::uint16_t>(frame, 2 * i);
    if (index >= hosted || seen[index]) {
      return Malformed("malformed index frame: " + std::to_string(count) + " distinct indexes below " +
                       std::to_string(hosted) + " expected, got a " + (index >= hosted ? "too large" : "repeated") +
                       " index " + std::to_string(index));
    }
    seen[index] = true;
    indexes->push_back(index);
  }
  return Status::Ok();
}

std::string PackIndexFrame(const std::vector<std::size_t>& indexes) {
  std::string frame(2 * indexes.size(), '\0');
  for (std::size_t i = 0; i < indexes.size(); ++i) Put(&frame, 2 * i, static_cast<std::uint16_t>(indexes[i]));
  return frame;
}

Status ParseStepDtypes(std::string_view frame, std::size_t leaves, std::vector<DType>* dtypes) {
  const std::string_view listing = frame.substr(kHeaderSize);
  nlohmann::json names = nlohmann::json::parse(listing.begin(), listing.end(), nullptr, false);
  if (names.is_discarded()) return Malformed("malformed STEP: the dtype listing after the header is not JSON");
  if (!names.is_array() || names.size() != leaves) {
    return Malformed("malformed STEP: expected " + std::to_string(leaves) + " action dtypes after the header");
  }
  dtypes->clear();
  for (const auto& name : names) {
    DType dtype;
    std::string why;
    if (!name.is_string()) return Malformed("malformed STEP: a dtype in the listing is not a string");
    if (!ParseDType(name.get<std::string>(), &dtype, &why)) return Malformed("malformed STEP: " + why);
    dtypes->push_back(dtype);
  }
  return Status::Ok();
}

std::string PackResultFrame(std::uint64_t seq, std::uint16_t flags, const std::vector<double>& rewards,
                            const std::vector<bool>& terminated, const std::vector<bool>& truncated) {
  const std::size_t count = rewards.size();
  std::string frame = PackHeader(MessageKind::kResult, seq, static_cast<std::uint16_t>(count), flags);
  frame.resize(kHeaderSize + 10 * count);
  for (std::size_t i = 0; i < count; ++i) {
    Put(&frame, kHeaderSize + 8 * i, rewards[i]);
    frame[kHeaderSize + 8 * count + i] = terminated[i] ? '\1' : '\0';
    frame[kHeaderSize + 9 * count + i] = truncated[i] ? '\1' : '\0';
  }
  return frame;
}

Status ParseResultFrame(std::string_view frame, std::size_t count, Header* header, std::vector<double>* rewards,
                        std::vector<bool>* terminated, std::vector<bool>* truncated) {
  GYM_REMOTE_RETURN_IF_ERROR(ParseHeader(frame, header));
  if (frame.size() != kHeaderSize + 10 * count) {
    return Malformed("malformed RESULT: header frame of " + std::to_string(frame.size()) + " bytes, expected " +
                     std::to_string(kHeaderSize + 10 * count) + " for " + std::to_string(count) + " envs");
  }
  rewards->clear();
  terminated->clear();
  truncated->clear();
  for (std::size_t i = 0; i < count; ++i) {
    rewards->push_back(Get<double>(frame, kHeaderSize + 8 * i));
    const auto term = static_cast<unsigned char>(frame[kHeaderSize + 8 * count + i]);
    const auto trunc = static_cast<unsigned char>(frame[kHeaderSize + 9 * count + i]);
    if (term > 1 || trunc > 1) return Malformed("malformed RESULT: terminated/truncated bytes must be 0 or 1");
    terminated->push_back(term == 1);
    truncated->push_back(trunc == 1);
  }
  return Status::Ok();
}

}  // namespace gym_remote
