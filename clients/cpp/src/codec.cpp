#include "gym_remote/codec.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <unordered_set>
#include <utility>

#include "json_read.hpp"
#include "text.hpp"

namespace gym_remote {

namespace {

// -- encoding ----------------------------------------------------------------------------------------

// Raised inside the encoder (as a Status) with the path to the offending part, innermost last.
struct Failure {
  std::string reason;
  std::vector<PathStep> path;
};

PathStep IndexStep(std::size_t index) {
  PathStep step;
  step.is_index = true;
  step.index = index;
  step.text = "[" + std::to_string(index) + "]";
  return step;
}

PathStep KeyStep(const std::string& key, const std::string& text) {
  PathStep step;
  step.key = key;
  step.text = text;
  return step;
}

class Encoder {
 public:
  explicit Encoder(EncodedValue* out) : out_(out) {}

  // Appends the JSON of `value` at nesting level `depth`; false with failure_ set if it cannot travel.
  bool Encode(const Value& value, int depth) {
    std::string& body = out_->body;
    switch (value.kind()) {
      case Value::Kind::kNull: body += "null"; return true;
      case Value::Kind::kBool: body += value.as_bool() ? "true" : "false"; return true;
      case Value::Kind::kInt: body += std::to_string(value.as_int()); return true;
      case Value::Kind::kString:
        if (!ValidUtf8(value.text())) return Fail("a str that is not valid UTF-8 cannot travel");
        AppendJsonString(value.text(), &body);
        return true;
      case Value::Kind::kFloat:
        if (std::isfinite(value.as_float())) {
          body += FormatFloat(value.as_float());
          return true;
        }
        break;
      default: break;
    }
    if (depth >= kMaxDepth) return Fail("it is nested deeper than " + std::to_string(kMaxDepth) + " levels");
    switch (value.kind()) {
      case Value::Kind::kFloat: {
        const double number = value.as_float();
        body += std::isnan(number) ? "[\"f\",\"nan\"]" : number > 0 ? "[\"f\",\"inf\"]" : "[\"f\",\"-inf\"]";
        return true;
      }
      case Value::Kind::kBigInt:
        body += "[\"i\",\"" + value.text() + "\"]";
        return true;
      case Value::Kind::kList:
      case Value::Kind::kTuple: {
        body += value.kind() == Value::Kind::kList ? "[\"l\"" : "[\"t\"";
        const auto& items = value.items();
        for (std::size_t i = 0; i < items.size(); ++i) {
          body += ',';
          if (!Item(items[i], IndexStep(i), depth)) return false;
        }
        body += ']';
        return true;
      }
      case Value::Kind::kDict: {
        body += '{';
        bool first = true;
        for (const auto& entry : value.entries()) {
          if (!first) body += ',';
          first = false;
          if (!ValidUtf8(entry.first)) return Fail("a dict key that is not valid UTF-8 cannot travel");
          AppendJsonString(entry.first, &body);
          body += ':';
          if (!Item(entry.second, KeyStep(entry.first, "[" + Value::String(entry.first).Repr() + "]"), depth)) {
            return false;
          }
        }
        body += '}';
        return true;
      }
      case Value::Kind::kPairDict: {
        body += "[\"d\"";
        for (const auto& pair : value.pairs()) {
          const std::string key_repr = pair.first.Repr();
          body += ',';
          if (!Item(pair.first, KeyStep(key_repr, " (key " + key_repr + ")"), depth)) return false;
          body += ',';
          if (!Item(pair.second, KeyStep(key_repr, "[" + key_repr + "]"), depth)) return false;
        }
        body += ']';
        return true;
      }
      case Value::Kind::kArray: {
        if (value.shape().size() > 32) return TooManyDimensions(value.shape().size());
        body += "[\"a\",\"";
        body += DTypeStr(value.dtype());
        body += "\",";
        AppendShape(value.shape());
        body += "," + std::to_string(AddBuffer(value.data())) + "]";
        return true;
      }
      case Value::Kind::kScalar:
        AppendScalar(value);
        return true;
      case Value::Kind::kObjectArray: {
        if (value.shape().size() > 32) return TooManyDimensions(value.shape().size());
        body += "[\"o\",";
        AppendShape(value.shape());
        body += ",[";
        const auto& items = value.items();
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) body += ',';
          if (!Item(items[i], IndexStep(i), depth)) return false;
        }
        body += "]]";
        return true;
      }
      case Value::Kind::kBytes:
        body += "[\"b\"," + std::to_string(AddBuffer(value.text())) + "]";
        return true;
      case Value::Kind::kGraph: {
        static const char* const names[] = {"nodes", "edges", "edge_links"};
        body += "[\"g\"";
        for (std::size_t i = 0; i < 3; ++i) {
          body += ',';
          if (!Item(value.items()[i], KeyStep(names[i], std::string(".") + names[i]), depth)) return false;
        }
        body += ']';
        return true;
      }
      default: break;
    }
    return Fail("a value of an unknown kind");
  }

  Failure failure;

 private:
  bool Fail(std::string reason) {
    failure.reason = std::move(reason);
    return false;
  }

  bool TooManyDimensions(std::size_t dimensions) {
    return Fail("arrays have at most 32 dimensions, this one has " + std::to_string(dimensions));
  }

  bool Item(const Value& item, PathStep step, int depth) {
    if (Encode(item, depth + 1)) return true;
    failure.path.insert(failure.path.begin(), std::move(step));
    return false;
  }

  std::size_t AddBuffer(std::string_view data) {
    out_->buffers.push_back(data);
    return out_->buffers.size() - 1;
  }

  void AppendShape(const Shape& shape) {
    std::string& body = out_->body;
    body += '[';
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i) body += ',';
      body += std::to_string(shape[i]);
    }
    body += ']';
  }

  void AppendScalar(const Value& value) {
    std::string& body = out_->body;
    const DType dtype = value.dtype();
    body += "[\"s\",\"";
    body += DTypeStr(dtype);
    body += "\",";
    if (dtype == DType::kBool) {
      body += value.ElementAsInt64(0) ? "true" : "false";
    } else if (dtype == DType::kUInt64) {
      body += std::to_string(static_cast<std::uint64_t>(value.ElementAsInt64(0)));
    } else if (IsFloat(dtype)) {
      const double number = value.ElementAsDouble(0);
      if (std::isfinite(number)) {
        body += FormatFloat(number);
      } else {
        body += std::isnan(number) ? "\"nan\"" : number > 0 ? "\"inf\"" : "\"-inf\"";
      }
    } else {
      body += std::to_string(value.ElementAsInt64(0));
    }
    body += ']';
  }

  EncodedValue* out_;
};

// -- decoding ----------------------------------------------------------------------------------------

Status Malformed(const std::string& reason) {
  return Status::Error(StatusCode::kProtocolError, "malformed value: " + reason);
}

// Bool data holds the bytes 0 and 1 only (PROTOCOL.md §3.2).
Status CheckBools(DType dtype, std::string_view data) {
  if (dtype != DType::kBool) return Status::Ok();
  for (char byte : data) {
    if (static_cast<unsigned char>(byte) > 1) {
      return Malformed("a bool array or scalar holds a byte other than 0 and 1");
    }
  }
  return Status::Ok();
}

// A short JSON rendering of a raw tree, for error messages.
void Preview(const RawJson& raw, std::string* out, std::size_t limit) {
  if (out->size() > limit) return;
  switch (raw.type) {
    case RawJson::Type::kNull: *out += "null"; break;
    case RawJson::Type::kBool: *out += raw.boolean ? "true" : "false"; break;
    case RawJson::Type::kInt: *out += std::to_string(raw.integer); break;
    case RawJson::Type::kBigLiteral: *out += raw.text; break;
    case RawJson::Type::kFloat: *out += FormatFloat(raw.number); break;
    case RawJson::Type::kString: *out += "'" + raw.text.substr(0, limit) + "'"; break;
    case RawJson::Type::kArray:
      *out += '[';
      for (std::size_t i = 0; i < raw.items.size() && out->size() <= limit; ++i) {
        if (i) *out += ", ";
        Preview(raw.items[i], out, limit);
      }
      *out += ']';
      break;
    case RawJson::Type::kObject:
      *out += '{';
      for (std::size_t i = 0; i < raw.members.size() && out->size() <= limit; ++i) {
        if (i) *out += ", ";
        *out += "'" + raw.members[i].first + "': ";
        Preview(raw.members[i].second, out, limit);
      }
      *out += '}';
      break;
  }
}

std::string Preview(const RawJson& raw) {
  std::string text;
  Preview(raw, &text, 60);
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

// A number as Python compares it: NaN, an exact integer (lowercase hex, '-' first if negative, "0" for
// zero), or a double that is not a whole number.
struct PythonNumber {
  bool nan = false;
  bool integral = false;
  std::string hex;
  double fraction = 0.0;
};

std::string UnsignedHex(std::uint64_t magnitude) {
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "%llx", static_cast<unsigned long long>(magnitude));
  return buffer;
}

std::string SignedHex(bool negative, std::string magnitude) {
  return negative && magnitude != "0" ? "-" + magnitude : magnitude;
}

PythonNumber FromDouble(double number) {
  PythonNumber out;
  if (std::isnan(number)) {
    out.nan = true;
  } else if (std::isinf(number) || std::trunc(number) != number) {
    out.fraction = number;  // (an infinity equals only the same infinity)
  } else {
    out.integral = true;
    int exponent = 0;
    const double mantissa = std::frexp(std::fabs(number), &exponent);  // |number| = mantissa * 2^exponent
    if (exponent <= 64) {
      out.hex = SignedHex(number < 0, UnsignedHex(static_cast<std::uint64_t>(std::fabs(number))));
    } else {  // 53 significant bits, then zeros: their hex digits, then a '0' per 4 bits of the rest
      const int shift = exponent - 53;
      const auto bits = static_cast<std::uint64_t>(std::ldexp(mantissa, 53)) << (shift % 4);
      out.hex = SignedHex(number < 0, UnsignedHex(bits) + std::string(static_cast<std::size_t>(shift / 4), '0'));
    }
  }
  return out;
}

// `value` as a number if it is one (bool, int, float, a numpy scalar), for comparing dict keys.
std::optional<PythonNumber> AsPythonNumber(const Value& value) {
  PythonNumber out;
  switch (value.kind()) {
    case Value::Kind::kBool:
      out.integral = true;
      out.hex = value.as_bool() ? "1" : "0";
      return out;
    case Value::Kind::kInt: {
      const std::int64_t number = value.as_int();
      const std::uint64_t magnitude =
          number < 0 ? ~static_cast<std::uint64_t>(number) + 1 : static_cast<std::uint64_t>(number);
      out.integral = true;
      out.hex = SignedHex(number < 0, UnsignedHex(magnitude));
      return out;
    }
    case Value::Kind::kBigInt: {
      const std::string& text = value.text();
      const bool negative = !text.empty() && text[0] == '-';
      const std::size_t first = text.find_first_not_of('0', negative ? 1 : 0);
      out.integral = true;
      out.hex = SignedHex(negative, first == std::string::npos ? "0" : text.substr(first));
      return out;
    }
    case Value::Kind::kFloat: return FromDouble(value.as_float());
    case Value::Kind::kScalar:
      if (IsFloat(value.dtype())) return FromDouble(value.ElementAsDouble(0));
      if (value.dtype() == DType::kUInt64) {
        out.integral = true;
        out.hex = UnsignedHex(static_cast<std::uint64_t>(value.ElementAsInt64(0)));
        return out;
      }
      return AsPythonNumber(Value::Int(value.ElementAsInt64(0)));
    default: return std::nullopt;
  }
}

// A text that two dict keys share exactly when they are one key under Python's == (PROTOCOL.md §3.1): 1, 1.0,
// True and np.int64(1) are; tuples (and GraphInstances, named tuples) are equal item by item; a str never
// equals a bytes. Nothing for a key that equals no other key: NaN, or a tuple holding one.
std::optional<std::string> KeyText(const Value& key) {
  if (const std::optional<PythonNumber> number = AsPythonNumber(key)) {
    if (number->nan) return std::nullopt;
    if (number->integral) return "i" + number->hex;
    char text[40];
    std::snprintf(text, sizeof(text), "f%a", number->fraction);
    return std::string(text);
  }
  switch (key.kind()) {
    case Value::Kind::kNull: return std::string("n");
    case Value::Kind::kString: return "s" + std::to_string(key.text().size()) + ":" + key.text();
    case Value::Kind::kBytes: return "b" + std::to_string(key.text().size()) + ":" + key.text();
    case Value::Kind::kTuple:
    case Value::Kind::kGraph: {
      std::string text = "t" + std::to_string(key.items().size()) + "(";
      for (const Value& item : key.items()) {
        const std::optional<std::string> part = KeyText(item);
        if (!part) return std::nullopt;
        text += std::to_string(part->size()) + ":" + *part;
      }
      return text + ")";
    }
    default: return std::nullopt;  // (not hashable: refused before)
  }
}

class Decoder {
 public:
  explicit Decoder(const std::vector<std::string_view>& buffers) : buffers_(buffers), used_(buffers.size(), false) {}

  // Every buffer frame must be referred to: an extra frame makes a message malformed, it is not padding.
  Status CheckAllUsed() const {
    std::size_t unused = 0;
    for (bool used : used_) unused += used ? 0 : 1;
    if (unused == 0) return Status::Ok();
    return Malformed(std::to_string(unused) + " of its " + std::to_string(buffers_.size()) + " buffer frames " +
                     (unused == 1 ? "is" : "are") + " not referred to by the body");
  }

  Status Decode(const RawJson& raw, int depth, Value* out) {
    switch (raw.type) {
      case RawJson::Type::kNull: *out = Value(); return Status::Ok();
      case RawJson::Type::kBool: *out = Value::Bool(raw.boolean); return Status::Ok();
      case RawJson::Type::kInt: *out = Value::Int(raw.integer); return Status::Ok();
      case RawJson::Type::kBigLiteral: return Value::IntFromDecimal(raw.text, out);
      case RawJson::Type::kFloat: *out = Value::Float(raw.number); return Status::Ok();
      case RawJson::Type::kString: *out = Value::String(raw.text); return Status::Ok();
      default: break;
    }
    if (depth >= kMaxDepth) return Malformed("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (raw.type == RawJson::Type::kObject) {
      Value::Entries entries;
      entries.reserve(raw.members.size());
      for (const auto& member : raw.members) {
        Value item;
        GYM_REMOTE_RETURN_IF_ERROR(Decode(member.second, depth + 1, &item));
        entries.emplace_back(member.first, std::move(item));
      }
      *out = Value::Dict(std::move(entries));
      return Status::Ok();
    }
    if (raw.items.empty() || raw.items[0].type != RawJson::Type::kString) {
      return Malformed("untagged JSON array " + Preview(raw));
    }
    const std::string& tag = raw.items[0].text;
    const int inner = depth + 1;
    if (tag == "l" || tag == "t") {
      Value::Items items;
      items.reserve(raw.items.size() - 1);
      for (std::size_t i = 1; i < raw.items.size(); ++i) {
        Value item;
        GYM_REMOTE_RETURN_IF_ERROR(Decode(raw.items[i], inner, &item));
        items.push_back(std::move(item));
      }
      *out = tag == "l" ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      return Status::Ok();
    }
    if (tag == "d") return DecodeDict(raw, inner, out);
    if (tag == "f") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 2));
      const RawJson& name = raw.items[1];
      if (name.type == RawJson::Type::kString) {
        if (name.text == "nan") *out = Value::Float(std::numeric_limits<double>::quiet_NaN());
        if (name.text == "inf") *out = Value::Float(std::numeric_limits<double>::infinity());
        if (name.text == "-inf") *out = Value::Float(-std::numeric_limits<double>::infinity());
        if (name.text == "nan" || name.text == "inf" || name.text == "-inf") return Status::Ok();
      }
      return Malformed("'f' tag expects 'nan', 'inf' or '-inf', got " + Preview(name));
    }
    if (tag == "a") return DecodeArray(raw, out);
    if (tag == "o") return DecodeObjectArray(raw, inner, out);
    if (tag == "s") return DecodeScalar(raw, out);
    if (tag == "S") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 3));
      DType dtype;
      GYM_REMOTE_RETURN_IF_ERROR(CheckDType(raw.items[1], &dtype));
      std::string_view data;
      GYM_REMOTE_RETURN_IF_ERROR(Buffer(raw.items[2], &data));
      if (data.size() != ItemSize(dtype)) {
        return Malformed(std::string("scalar of dtype ") + DTypeName(dtype) + " needs " +
                         std::to_string(ItemSize(dtype)) + " bytes, got " + std::to_string(data.size()));
      }
      GYM_REMOTE_RETURN_IF_ERROR(CheckBools(dtype, data));
      return Value::ScalarFromBytes(dtype, data, out);
    }
    if (tag == "b") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 2));
      std::string_view data;
      GYM_REMOTE_RETURN_IF_ERROR(Buffer(raw.items[1], &data));
      *out = Value::Bytes(std::string(data));
      return Status::Ok();
    }
    if (tag == "g") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 4));
      Value parts[3];
      for (std::size_t i = 0; i < 3; ++i) GYM_REMOTE_RETURN_IF_ERROR(Decode(raw.items[i + 1], inner, &parts[i]));
      *out = Value::Graph(std::move(parts[0]), std::move(parts[1]), std::move(parts[2]));
      return Status::Ok();
    }
    if (tag == "p") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 2));
      return Status::Error(StatusCode::kProtocolError,
                           "the peer sent a pickled value, but pickle is not allowed on this connection (it would "
                           "let the peer run code here); only the trusted mode accepts pickles, and this client "
                           "has none");
    }
    if (tag == "i") {
      GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 2));
      if (raw.items[1].type != RawJson::Type::kString) {
        return Malformed("'i' expects lowercase hex digits, got " + Preview(raw.items[1]));
      }
      Status status = Value::BigIntFromHex(raw.items[1].text, out);
      return status.ok() ? status : Malformed(status.message());
    }
    return Malformed("unknown tag '" + tag.substr(0, 40) + "'");
  }

 private:
  static Status ExpectLength(const RawJson& raw, std::size_t length) {
    if (raw.items.size() != length) {
      return Malformed("tag '" + raw.items[0].text + "' takes " + std::to_string(length - 1) + " fields, got " +
                       std::to_string(raw.items.size() - 1));
    }
    return Status::Ok();
  }

  static Status CheckDType(const RawJson& raw, DType* dtype) {
    if (raw.type != RawJson::Type::kString) return Malformed("bad dtype " + Preview(raw));
    std::string why;
    if (!ParseDType(raw.text, dtype, &why)) return Malformed(why);
    return Status::Ok();
  }

  static Status CheckShape(const RawJson& raw, Shape* shape) {
    bool ok = raw.type == RawJson::Type::kArray && raw.items.size() <= 32;
    for (std::size_t i = 0; ok && i < raw.items.size(); ++i) {
      ok = raw.items[i].type == RawJson::Type::kInt && raw.items[i].integer >= 0;
      if (ok) shape->push_back(raw.items[i].integer);
    }
    if (!ok) return Malformed("bad array shape " + Preview(raw));
    return Status::Ok();
  }

  Status Buffer(const RawJson& raw, std::string_view* data) {
    if (raw.type != RawJson::Type::kInt || raw.integer < 0 ||
        static_cast<std::uint64_t>(raw.integer) >= buffers_.size()) {
      return Malformed("buffer index " + Preview(raw) + " (the message has " + std::to_string(buffers_.size()) +
                       ")");
    }
    const auto index = static_cast<std::size_t>(raw.integer);
    used_[index] = true;
    *data = buffers_[index];
    return Status::Ok();
  }

  Status DecodeDict(const RawJson& raw, int depth, Value* out) {
    if (raw.items.size() % 2 != 1) return Malformed("a 'd' array needs key/value pairs");
    Value::Pairs pairs;
    std::unordered_set<std::string> seen;
    for (std::size_t i = 1; i < raw.items.size(); i += 2) {
      Value key, item;
      GYM_REMOTE_RETURN_IF_ERROR(Decode(raw.items[i], depth, &key));
      if (!key.Hashable()) return Malformed("dict key of type " + key.TypeName() + " is not hashable");
      const std::optional<std::string> text = KeyText(key);
      if (text && !seen.insert(*text).second) {  // one Python dict cannot hold two equal keys: which value is meant?
        return Malformed("a 'd' array repeats the dict key " + key.Repr());
      }
      GYM_REMOTE_RETURN_IF_ERROR(Decode(raw.items[i + 1], depth, &item));
      pairs.emplace_back(std::move(key), std::move(item));
    }
    *out = Value::PairDict(std::move(pairs));
    return Status::Ok();
  }

  Status DecodeArray(const RawJson& raw, Value* out) {
    GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 4));
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(CheckDType(raw.items[1], &dtype));
    Shape shape;
    GYM_REMOTE_RETURN_IF_ERROR(CheckShape(raw.items[2], &shape));
    std::string_view data;
    GYM_REMOTE_RETURN_IF_ERROR(Buffer(raw.items[3], &data));
    std::size_t count = 0;
    const bool sized = ShapeSize(shape, &count) && count <= std::numeric_limits<std::size_t>::max() / 8;
    if (!sized || count * ItemSize(dtype) != data.size()) {
      std::string dims;
      for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
      if (shape.size() == 1) dims += ",";
      return Malformed(std::string("array of dtype ") + DTypeName(dtype) + " and shape (" + dims + ") needs " +
                       (sized ? std::to_string(count * ItemSize(dtype)) : std::string("too many")) +
                       " bytes, its buffer has " + std::to_string(data.size()));
    }
    GYM_REMOTE_RETURN_IF_ERROR(CheckBools(dtype, data));
    return Value::Array(dtype, std::move(shape), std::string(data), out);
  }

  Status DecodeObjectArray(const RawJson& raw, int depth, Value* out) {
    GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 3));
    Shape shape;
    GYM_REMOTE_RETURN_IF_ERROR(CheckShape(raw.items[1], &shape));
    const RawJson& items = raw.items[2];
    std::size_t count = 0;
    if (items.type != RawJson::Type::kArray || !ShapeSize(shape, &count) || count != items.items.size()) {
      return Malformed("'o' array item count does not match its shape");
    }
    Value::Items decoded;
    decoded.reserve(count);
    for (const RawJson& item : items.items) {
      Value value;
      GYM_REMOTE_RETURN_IF_ERROR(Decode(item, depth, &value));
      decoded.push_back(std::move(value));
    }
    return Value::ObjectArray(std::move(shape), std::move(decoded), out);
  }

  static Status DecodeScalar(const RawJson& raw, Value* out) {
    GYM_REMOTE_RETURN_IF_ERROR(ExpectLength(raw, 3));
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(CheckDType(raw.items[1], &dtype));
    const RawJson& number = raw.items[2];
    const bool integer = number.type == RawJson::Type::kInt || number.type == RawJson::Type::kBigLiteral;
    if (dtype == DType::kBool && number.type == RawJson::Type::kBool) {
      *out = Value::ScalarBool(number.boolean);
      return Status::Ok();
    }
    if ((IsSignedInt(dtype) || IsUnsignedInt(dtype)) && integer) {
      const int bits = static_cast<int>(ItemSize(dtype)) * 8;
      bool fits = false;
      if (number.type == RawJson::Type::kInt) {
        const std::int64_t v = number.integer;
        if (IsSignedInt(dtype)) {
          fits = bits == 64 || (v >= -(std::int64_t{1} << (bits - 1)) && v < (std::int64_t{1} << (bits - 1)));
          if (fits) *out = Value::ScalarInt(dtype, v);
        } else {
          fits = v >= 0 && (bits == 64 || v < (std::int64_t{1} << bits));
          if (fits) *out = Value::ScalarUInt(dtype, static_cast<std::uint64_t>(v));
        }
      } else if (dtype == DType::kUInt64 && number.text[0] != '-') {  // above int64, maybe within uint64
        errno = 0;
        char* end = nullptr;
        const unsigned long long v = std::strtoull(number.text.c_str(), &end, 10);
        fits = errno == 0 && end != nullptr && *end == '\0';
        if (fits) *out = Value::ScalarUInt(dtype, v);
      }
      if (!fits) return Malformed(Preview(number) + " does not fit in " + DTypeName(dtype));
      return Status::Ok();
    }
    if (IsFloat(dtype)) {
      if (integer || number.type == RawJson::Type::kFloat) {
        const double value = number.type == RawJson::Type::kFloat ? number.number
                             : number.type == RawJson::Type::kInt ? static_cast<double>(number.integer)
                                                                  : std::strtod(number.text.c_str(), nullptr);
        const bool fits = dtype == DType::kFloat32 ? std::isfinite(static_cast<float>(value)) : std::isfinite(value);
        if (!fits) {
          return Malformed(Preview(number) + " does not fit in " + DTypeName(dtype) + " (use 'inf' for infinity)");
        }
        *out = Value::ScalarFloat(dtype, value);
        return Status::Ok();
      }
      if (number.type == RawJson::Type::kString) {
        const std::string& name = number.text;
        if (name == "nan" || name == "inf" || name == "-inf") {
          const double value = name == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                               : name == "inf" ? std::numeric_limits<double>::infinity()
                                               : -std::numeric_limits<double>::infinity();
          *out = Value::ScalarFloat(dtype, value);
          return Status::Ok();
        }
      }
    }
    return Malformed("'s' scalar " + Preview(number) + " does not suit dtype " + DTypeName(dtype));
  }

  const std::vector<std::string_view>& buffers_;
  std::vector<bool> used_;
};

// JSON nesting allowed while parsing: every valid value fits (an 'o' array takes two JSON levels for
// one of the value's), deeper text is refused before it is built.
constexpr std::size_t kMaxJsonDepth = 2 * kMaxDepth + 8;

}  // namespace

Status EncodeValue(const Value& value, EncodedValue* out, std::string_view what, std::vector<PathStep>* failed_at) {
  out->body.clear();
  out->buffers.clear();
  Encoder encoder(out);
  if (encoder.Encode(value, 0)) return Status::Ok();
  std::string where(what);
  for (const PathStep& step : encoder.failure.path) where += step.text;
  if (failed_at != nullptr) *failed_at = encoder.failure.path;
  out->body.clear();
  out->buffers.clear();
  return Status::Error(StatusCode::kEncodeError, "cannot send " + where + ": " + encoder.failure.reason);
}

Status DecodeValue(std::string_view body, const std::vector<std::string_view>& buffers, Value* out) {
  if (!ValidUtf8(body)) return Malformed("the body is not valid UTF-8");
  RawJson raw;
  Status parsed = ParseJson(body, kMaxJsonDepth, &raw);
  if (!parsed.ok()) {
    if (parsed.message().find("nested deeper") != std::string::npos) {
      return Malformed("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    return Malformed("not JSON: " + parsed.message());
  }
  Decoder decoder(buffers);
  GYM_REMOTE_RETURN_IF_ERROR(decoder.Decode(raw, 0, out));
  return decoder.CheckAllUsed();
}

}  // namespace gym_remote
