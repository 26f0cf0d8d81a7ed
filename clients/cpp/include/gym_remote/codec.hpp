// Values to a value section (a JSON body and buffer frames) and back: PROTOCOL.md §2.2 and §3.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "gym_remote/status.hpp"
#include "gym_remote/value.hpp"

namespace gym_remote {

// Containers and tagged values nest at most this deep (the top-level value is at level 0).
constexpr int kMaxDepth = 64;

struct EncodedValue {
  std::string body;                       // ASCII JSON
  std::vector<std::string_view> buffers;  // views into the encoded Value's bytes and arrays: valid while
                                          // that Value lives unchanged
};

// One step of the path to a part of a value, as the Python codec names it in errors.
struct PathStep {
  bool is_index = false;
  std::size_t index = 0;  // list/tuple position (is_index)
  std::string key;        // dict key (not is_index)
  std::string text;       // "[3]", "['stats']", " (key 1)", ".nodes"
};

// Encodes `value` exactly as gym_remote's Python codec does (same body bytes, same buffers). Fails
// (kEncodeError) for a value that cannot travel: nested deeper than 64 levels, a string that is not
// valid UTF-8; the message names the part, e.g. "cannot send infos of slot 3['x'][1]: ...", where
// `what` ("infos of slot 3") comes first. `failed_at` (if given) receives the path to that part.
Status EncodeValue(const Value& value, EncodedValue* out, std::string_view what = "value",
                   std::vector<PathStep>* failed_at = nullptr);

// Decodes a body and its buffers with every check of PROTOCOL.md §3 (kProtocolError, the message
// starting "malformed value: "). Pickles (tag "p") are refused: this client has no trusted mode.
Status DecodeValue(std::string_view body, const std::vector<std::string_view>& buffers, Value* out);

}  // namespace gym_remote
