// Message frames of the protocol (PROTOCOL.md §2, §4, §5): the 16-byte header, index frames, the
// STEP dtype listing and RESULT's scalars. Pure functions, no sockets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gym_remote/dtype.hpp"
#include "gym_remote/status.hpp"

// Frames, array data and data channel records are read and written in the host's byte order.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the gym_remote C++ client supports little-endian hosts only (x86-64, aarch64)"
#endif

namespace gym_remote {

constexpr std::uint8_t kProtocolVersion = 2;
constexpr std::size_t kHeaderSize = 16;
constexpr std::size_t kMaxFrames = 65536;       // frames a message may have
constexpr std::size_t kMaxEnvsPerClient = 65535;

enum class MessageKind : std::uint8_t {
  kHello = 1,
  kWelcome = 2,
  kRefuse = 3,
  kBye = 4,
  kClose = 5,
  kPing = 6,
  kEvict = 7,
  kStatus = 8,         // C->S from a status peer (PROTOCOL.md §9.1); a client never receives it
  kStatusReport = 9,
  kReset = 10,
  kStep = 11,
  kCall = 12,
  kSetAttr = 13,
  kResult = 20,
  kCallResult = 21,
  kError = 22,
};

constexpr std::uint16_t kFlagValue = 0x1;   // a value section follows
constexpr std::uint16_t kFlagDtypes = 0x2;  // STEP: the action frames' dtypes follow the header
constexpr std::uint16_t kFlagSubset = 0x4;  // frame 1 is an index frame
constexpr std::uint16_t kFlagCrowded = 0x8;  // commands: the server has no core to spare for a client's spin
constexpr std::uint16_t kFlagEach = 0x10;    // STEP: each env stands alone (errors listed in the RESULT)

struct Header {
  std::uint8_t version = kProtocolVersion;
  std::uint8_t kind = 0;
  std::uint16_t flags = 0;
  std::uint16_t count = 0;
  std::uint64_t seq = 0;
};

// "HELLO", "STEP", ... or "kind 99".
std::string KindName(std::uint8_t kind);

std::string PackHeader(MessageKind kind, std::uint64_t seq = 0, std::uint16_t count = 0, std::uint16_t flags = 0);
// Parses a header frame (at least 16 bytes, magic "GR"; in version 2 a known kind). The version is
// returned, not checked, so that a peer can answer a mismatch.
Status ParseHeader(std::string_view frame, Header* header);

// The index frame of a command for some envs: `count` (>= 1) distinct little-endian uint16 indexes
// below `hosted` (PROTOCOL.md §5.5).
Status ParseIndexFrame(std::string_view frame, std::uint16_t count, std::size_t hosted,
                       std::vector<std::size_t>* indexes);
std::string PackIndexFrame(const std::vector<std::size_t>& indexes);

// The dtypes listed after the header of a STEP with FLAG_DTYPES (a JSON array, one per action leaf).
Status ParseStepDtypes(std::string_view frame, std::size_t leaves, std::vector<DType>* dtypes);

// RESULT's frame 0: the header, then `count` float64 rewards, `count` terminated bytes and `count`
// truncated bytes (each 0 or 1).
std::string PackResultFrame(std::uint64_t seq, std::uint16_t flags, const std::vector<double>& rewards,
                            const std::vector<bool>& terminated, const std::vector<bool>& truncated);

// Parses RESULT's frame 0 for `count` envs (the server's side; here for tests and tools): exactly
// 16 + 10 * count bytes, flag bytes 0 or 1.
Status ParseResultFrame(std::string_view frame, std::size_t count, Header* header, std::vector<double>* rewards,
                        std::vector<bool>* terminated, std::vector<bool>* truncated);

}  // namespace gym_remote
