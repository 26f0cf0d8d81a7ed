#include "text.hpp"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <system_error>

namespace gym_remote {

std::string FormatFloat(double number) {
  // The shortest round-trip digits, in scientific form: "-1.2345e+02", "1e+16", "0e+00".
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), number, std::chars_format::scientific);
  const std::string text(buffer, result.ptr);
  std::size_t position = 0;
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    position = 1;
  }
  const std::size_t e = text.find('e');
  std::string digits;
  for (std::size_t i = position; i < e; ++i) {
    if (text[i] != '.') digits += text[i];
  }
  const int exponent = std::atoi(text.c_str() + e + 1);
  // Python (float_repr_style "short"): positional notation when -4 <= exponent < 16.
  if (exponent >= -4 && exponent < 16) {
    std::string out = sign;
    if (exponent >= 0) {
      const std::size_t whole = static_cast<std::size_t>(exponent) + 1;
      if (digits.size() <= whole) {
        out += digits + std::string(whole - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, whole) + "." + digits.substr(whole);
      }
    } else {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int magnitude = exponent < 0 ? -exponent : exponent;
  out += exponent < 0 ? "e-" : "e+";
  if (magnitude < 10) out += '0';
  out += std::to_string(magnitude);
  return out;
}

namespace {

// Decodes one UTF-8 sequence at `text[*position]`; false if it is not valid UTF-8.
bool NextCodePoint(std::string_view text, std::size_t* position, std::uint32_t* code_point) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const std::size_t i = *position;
  const unsigned char lead = byte(i);
  std::size_t length;
  std::uint32_t value;
  if (lead < 0x80) {
    *code_point = lead;
    *position = i + 1;
    return true;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2;
    value = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    value = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    value = lead & 0x07;
  } else {
    return false;
  }
  if (i + length > text.size()) return false;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return false;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  static const std::uint32_t minimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < minimum[length] || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return false;
  *code_point = value;
  *position = i + length;
  return true;
}

void AppendEscape(std::uint32_t unit, std::string* out) {
  static const char digits[] = "0123456789abcdef";
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(digits[(unit >> shift) & 15]);
}

}  // namespace

bool ValidUtf8(std::string_view text) {
  std::size_t position = 0;
  std::uint32_t code_point = 0;
  while (position < text.size()) {
    if (!NextCodePoint(text, &position, &code_point)) return false;
  }
  return true;
}

void AppendJsonString(std::string_view utf8, std::string* out) {
  out->push_back('"');
  std::size_t position = 0;
  std::uint32_t c = 0;
  while (position < utf8.size()) {
    if (!NextCodePoint(utf8, &position, &c)) {
      c = 0xFFFD;  // callers check validity first; never emit invalid JSON
      ++position;
    }
    switch (c) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      default: break;
    }
    if (c >= 0x20 && c < 0x7F) {
      out->push_back(static_cast<char>(c));
    } else if (c < 0x10000) {
      AppendEscape(c, out);
    } else {
      const std::uint32_t v = c - 0x10000;
      AppendEscape(0xD800 + (v >> 10), out);
      AppendEscape(0xDC00 + (v & 0x3FF), out);
    }
  }
  out->push_back('"');
}

std::string Hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) {
    out += digits[byte >> 4];
    out += digits[byte & 15];
  }
  return out;
}

std::string Unhex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

}  // namespace gym_remote
