// JSON text to a plain tree that keeps what the value decoder needs to know about each number: whether
// it was written as an integer or as a float (PROTOCOL.md §3.1), and an integer's exact digits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gym_remote/status.hpp"

namespace gym_remote {

struct RawJson {
  enum class Type { kNull, kBool, kInt, kBigLiteral, kFloat, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::int64_t integer = 0;  // kInt
  double number = 0.0;       // kFloat (always finite)
  std::string text;          // kString (UTF-8); kBigLiteral: the decimal digits, with '-' if negative
  std::vector<RawJson> items;                             // kArray
  std::vector<std::pair<std::string, RawJson>> members;  // kObject, duplicate keys merged as Python does
};

// Parses `text` (which must be the whole JSON document). Arrays and objects nested deeper than
// `max_depth` are refused before they are built. Bare NaN/Infinity and numbers that overflow a double
// are refused; integer literals of any size are kept exactly (kInt, else kBigLiteral).
Status ParseJson(std::string_view text, std::size_t max_depth, RawJson* out);

}  // namespace gym_remote
