// Text helpers of the value encoding: Python's float repr, UTF-8 checks, ASCII-only JSON strings.
#pragma once

#include <string>
#include <string_view>

namespace gym_remote {

// A finite double as Python's repr() writes it (and json.dumps): the shortest text that reads back
// as the same double, always with a '.' or an exponent: 1.0, 0.1, 1e+16, 1e-05, -0.0, 5e-324.
std::string FormatFloat(double number);

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool ValidUtf8(std::string_view text);

// Appends `utf8` as a JSON string literal in ASCII, escaped as Python's json.dumps(ensure_ascii=True)
// escapes it (\" \\ \n \r \t \b \f, \u00XX for other control characters and DEL, \uXXXX (lowercase)
// for everything beyond ASCII, surrogate pairs above U+FFFF). `utf8` must be valid UTF-8.
void AppendJsonString(std::string_view utf8, std::string* out);

// Bytes as lowercase hexadecimal, two digits each, and back (Unhex expects an even number of hex digits).
std::string Hex(std::string_view bytes);
std::string Unhex(std::string_view hex);

}  // namespace gym_remote
