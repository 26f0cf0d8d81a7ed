#include "json_read.hpp"

#include <limits>
#include <new>
#include <nlohmann/json.hpp>

namespace gym_remote {

namespace {

using json = nlohmann::json;

// Builds a RawJson from nlohmann's SAX events (its parser is not recursive, nor is this builder).
class Builder : public nlohmann::json_sax<json> {
 public:
  explicit Builder(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() override { return Add(RawJson{}); }
  bool boolean(bool value) override {
    RawJson raw;
    raw.type = RawJson::Type::kBool;
    raw.boolean = value;
    return Add(std::move(raw));
  }
  bool number_integer(number_integer_t value) override {
    RawJson raw;
    raw.type = RawJson::Type::kInt;
    raw.integer = value;
    return Add(std::move(raw));
  }
  bool number_unsigned(number_unsigned_t value) override {
    RawJson raw;
    if (value <= static_cast<number_unsigned_t>(std::numeric_limits<std::int64_t>::max())) {
      raw.type = RawJson::Type::kInt;
      raw.integer = static_cast<std::int64_t>(value);
    } else {
      raw.type = RawJson::Type::kBigLiteral;
      raw.text = std::to_string(value);
    }
    return Add(std::move(raw));
  }
  bool number_float(number_float_t value, const string_t& text) override {
    RawJson raw;
    // nlohmann reads integer literals beyond 64 bits as floats; their text says what they are.
    if (text.find_first_of(".eE") == std::string::npos) {
      raw.type = RawJson::Type::kBigLiteral;
      raw.text = text;
    } else {
      raw.type = RawJson::Type::kFloat;
      raw.number = value;  // nlohmann refuses literals that overflow a double
    }
    return Add(std::move(raw));
  }
  bool string(string_t& value) override {
    RawJson raw;
    raw.type = RawJson::Type::kString;
    raw.text = std::move(value);
    return Add(std::move(raw));
  }
  bool binary(binary_t&) override { return Fail("binary data in JSON text"); }
  bool start_object(std::size_t) override { return Open(RawJson::Type::kObject); }
  bool key(string_t& value) override {
    key_ = std::move(value);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(RawJson::Type::kArray); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) override {
    return Fail(error.what());
  }

  Status Finish(RawJson* out) {
    if (!error_.empty()) return Status::Error(StatusCode::kProtocolError, error_);
    if (!done_ || !stack_.empty()) return Status::Error(StatusCode::kProtocolError, "incomplete JSON");
    *out = std::move(root_);
    return Status::Ok();
  }

 private:
  struct Open_ {
    RawJson node;
    std::string key;  // for an object inside an object: its key in the parent
  };

  bool Fail(std::string reason) {
    if (error_.empty()) error_ = std::move(reason);
    return false;
  }

  // Places a finished node in its parent (or as the root).
  bool Add(RawJson node) {
    if (stack_.empty()) {
      root_ = std::move(node);
      done_ = true;
      return true;
    }
    RawJson& parent = stack_.back().node;
    if (parent.type == RawJson::Type::kArray) {
      parent.items.push_back(std::move(node));
      return true;
    }
    for (auto& member : parent.members) {  // a repeated key: the last value wins, in the first place
      if (member.first == key_) {
        member.second = std::move(node);
        return true;
      }
    }
    parent.members.emplace_back(std::move(key_), std::move(node));
    return true;
  }

  bool Open(RawJson::Type type) {
    if (stack_.size() >= max_depth_) return Fail("nested deeper than 64 levels");
    Open_ open;
    open.node.type = type;
    open.key = std::move(key_);
    stack_.push_back(std::move(open));
    return true;
  }

  bool Close() {
    Open_ open = std::move(stack_.back());
    stack_.pop_back();
    key_ = std::move(open.key);
    return Add(std::move(open.node));
  }

  std::size_t max_depth_;
  std::vector<Open_> stack_;
  std::string key_;
  RawJson root_;
  bool done_ = false;
  std::string error_;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of a \uXXXX escape at text[i] (the backslash), or -1.
long EscapedUnit(std::string_view text, std::size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  long unit = 0;
  for (std::size_t k = i + 2; k < i + 6; ++k) {
    const int digit = HexDigit(text[k]);
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

// `text` with every \u escape of a lone surrogate replaced by \ufffd (PROTOCOL.md §3.1: a receiver
// whose strings cannot hold one replaces it); false if there was none.
bool ReplaceLoneSurrogates(std::string_view text, std::string* fixed) {
  if (text.find("\\ud") == std::string_view::npos && text.find("\\uD") == std::string_view::npos) return false;
  bool changed = false, in_string = false;
  fixed->clear();
  fixed->reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) {
      in_string = c == '"';
      fixed->push_back(c);
      continue;
    }
    if (c == '"') {
      in_string = false;
      fixed->push_back(c);
      continue;
    }
    if (c != '\\' || i + 1 >= text.size()) {
      fixed->push_back(c);
      continue;
    }
    const long unit = EscapedUnit(text, i);
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const long next = EscapedUnit(text, i + 6);
      if (next >= 0xDC00 && next <= 0xDFFF) {  // a pair: keep both
        fixed->append(text.substr(i, 12));
        i += 11;
        continue;
      }
    }
    if (unit >= 0xD800 && unit <= 0xDFFF) {
      fixed->append("\\ufffd");
      changed = true;
      i += 5;
      continue;
    }
    fixed->append(text.substr(i, 2));  // any other escape, whole
    i += 1;
  }
  return changed;
}

}  // namespace

Status ParseJson(std::string_view text, std::size_t max_depth, RawJson* out) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {
    return Status::Error(StatusCode::kProtocolError, "the body starts with a UTF-8 byte order mark");
  }
  std::string fixed;
  if (ReplaceLoneSurrogates(text, &fixed)) text = fixed;
  Builder builder(max_depth);
  try {
    json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json, true);
  } catch (const std::bad_alloc&) {
    return Status::Error(StatusCode::kProtocolError, "out of memory while parsing JSON");
  } catch (const std::exception& error) {
    return Status::Error(StatusCode::kProtocolError, error.what());
  }
  return builder.Finish(out);
}

}  // namespace gym_remote
