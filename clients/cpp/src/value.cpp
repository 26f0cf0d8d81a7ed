#include "gym_remote/value.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "text.hpp"

namespace gym_remote {

namespace {

template <typename T>
T Load(const std::string& data, std::size_t index) {
  T number;
  std::memcpy(&number, data.data() + index * sizeof(T), sizeof(T));
  return number;
}

// A double truncated toward zero into int64, saturating (and 0 for NaN): no undefined behaviour.
std::int64_t TruncateToInt64(double number) {
  if (std::isnan(number)) return 0;
  if (number >= 9223372036854775807.0) return std::numeric_limits<std::int64_t>::max();
  if (number <= -9223372036854775808.0) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(number);
}

bool ValidHex(std::string_view hex) {
  std::size_t start = (!hex.empty() && hex[0] == '-') ? 1 : 0;
  if (hex.size() <= start) return false;
  for (std::size_t i = start; i < hex.size(); ++i) {
    const char c = hex[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string PythonString(const std::string& utf8) {
  // Python's repr of a str: single quotes unless the text holds one and no double quote.
  const bool single = utf8.find('\'') == std::string::npos || utf8.find('"') != std::string::npos;
  const char quote = single ? '\'' : '"';
  std::string out(1, quote);
  for (unsigned char c : utf8) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char digits[] = "0123456789abcdef";
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string PythonBytes(const std::string& data) {
  std::string out = "b'";
  static const char digits[] = "0123456789abcdef";
  for (unsigned char c : data) {
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string FloatRepr(double number) {
  if (std::isnan(number)) return "nan";
  if (std::isinf(number)) return number > 0 ? "inf" : "-inf";
  return FormatFloat(number);
}

bool SameBits(double a, double b) {
  std::uint64_t x, y;
  std::memcpy(&x, &a, sizeof(x));
  std::memcpy(&y, &b, sizeof(y));
  return x == y || (std::isnan(a) && std::isnan(b));
}

}  // namespace

// -- construction -----------------------------------------------------------------------------------

Value Value::Bool(bool value) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  return v;
}

Value Value::Int(std::int64_t value) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = value;
  return v;
}

Value Value::UInt(std::uint64_t value) {
  if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return Int(static_cast<std::int64_t>(value));
  }
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  while (value != 0) {
    hex.insert(hex.begin(), digits[value & 15]);
    value >>= 4;
  }
  Value v;
  v.kind_ = Kind::kBigInt;
  v.text_ = hex;
  return v;
}

Status Value::BigIntFromHex(std::string_view hex, Value* out) {
  if (!ValidHex(hex)) {
    return Status::Error(StatusCode::kProtocolError, "'i' expects lowercase hex digits, got '" +
                                                         std::string(hex.substr(0, 60)) + "'");
  }
  const bool negative = hex[0] == '-';
  std::string_view digits = hex.substr(negative ? 1 : 0);
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  if (digits == "0") {
    *out = Int(0);
    return Status::Ok();
  }
  if (digits.size() <= 16) {
    std::uint64_t magnitude = 0;
    for (char c : digits) magnitude = magnitude * 16 + static_cast<std::uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    if (!negative && magnitude <= limit) {
      *out = Int(static_cast<std::int64_t>(magnitude));
      return Status::Ok();
    }
    if (negative && magnitude <= limit + 1) {
      *out = Int(magnitude == limit + 1 ? std::numeric_limits<std::int64_t>::min()
                                        : -static_cast<std::int64_t>(magnitude));
      return Status::Ok();
    }
  }
  Value v;
  v.kind_ = Kind::kBigInt;
  v.text_ = (negative ? "-" : "") + std::string(digits);
  *out = std::move(v);
  return Status::Ok();
}

Status Value::IntFromDecimal(std::string_view decimal, Value* out) {
  const bool negative = !decimal.empty() && decimal[0] == '-';
  std::string_view digits = decimal.substr(negative ? 1 : 0);
  if (digits.empty()) return Status::Error(StatusCode::kProtocolError, "an integer without digits");
  // Base conversion by repeated multiply-add on base-16 digits (little-endian nibbles).
  std::vector<std::uint8_t> nibbles;
  for (char c : digits) {
    if (c < '0' || c > '9') return Status::Error(StatusCode::kProtocolError, "bad integer literal");
    unsigned carry = static_cast<unsigned>(c - '0');
    for (std::uint8_t& nibble : nibbles) {
      const unsigned product = nibble * 10u + carry;
      nibble = static_cast<std::uint8_t>(product & 15u);
      carry = product >> 4;
    }
    while (carry != 0) {
      nibbles.push_back(static_cast<std::uint8_t>(carry & 15u));
      carry >>= 4;
    }
  }
  static const char hex_digits[] = "0123456789abcdef";
  std::string hex = negative ? "-" : "";
  if (nibbles.empty()) hex += '0';
  for (auto it = nibbles.rbegin(); it != nibbles.rend(); ++it) hex += hex_digits[*it];
  return BigIntFromHex(hex, out);
}

Value Value::Float(double value) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = value;
  return v;
}

Value Value::String(std::string utf8) {
  Value v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(utf8);
  return v;
}

Value Value::Bytes(std::string data) {
  Value v;
  v.kind_ = Kind::kBytes;
  v.text_ = std::move(data);
  return v;
}

Value Value::List(Items items) {
  Value v;
  v.kind_ = Kind::kList;
  v.items_ = std::move(items);
  return v;
}

Value Value::Tuple(Items items) {
  Value v;
  v.kind_ = Kind::kTuple;
  v.items_ = std::move(items);
  return v;
}

Value Value::Dict(Entries entries) {
  Value v;
  v.kind_ = Kind::kDict;
  v.entries_ = std::move(entries);
  return v;
}

Value Value::PairDict(Pairs pairs) {
  bool all_strings = true;
  for (const auto& pair : pairs) all_strings = all_strings && pair.first.kind() == Kind::kString;
  if (all_strings) {  // a dict whose keys are all str is a plain dict
    Value v = Dict();
    for (auto& pair : pairs) v.Set(pair.first.text(), std::move(pair.second));
    return v;
  }
  Value v;
  v.kind_ = Kind::kPairDict;
  v.pairs_ = std::move(pairs);
  return v;
}

Value Value::Raw(DType dtype, Shape shape, std::string data, Kind kind) {
  Value v;
  v.kind_ = kind;
  v.dtype_ = dtype;
  v.shape_ = std::move(shape);
  v.text_ = std::move(data);
  return v;
}

Status Value::Array(DType dtype, Shape shape, std::string data, Value* out) {
  std::size_t count = 0;
  if (shape.size() > 32 || !ShapeSize(shape, &count)) {
    return Status::Error(StatusCode::kInvalidArgument, "bad array shape");
  }
  if (count > std::numeric_limits<std::size_t>::max() / ItemSize(dtype) || count * ItemSize(dtype) != data.size()) {
    return Status::Error(StatusCode::kInvalidArgument,
                         "an array of dtype " + std::string(DTypeName(dtype)) + " and " + std::to_string(count) +
                             " elements needs " + std::to_string(count * ItemSize(dtype)) + " bytes, got " +
                             std::to_string(data.size()));
  }
  *out = Raw(dtype, std::move(shape), std::move(data), Kind::kArray);
  return Status::Ok();
}

Value Value::ScalarBool(bool value) {
  std::string data(1, value ? '\1' : '\0');
  return Raw(DType::kBool, {}, std::move(data), Kind::kScalar);
}

Value Value::ScalarInt(DType dtype, std::int64_t value) {
  std::string data(ItemSize(dtype), '\0');
  Store(dtype, value, &data[0]);
  return Raw(dtype, {}, std::move(data), Kind::kScalar);
}

Value Value::ScalarUInt(DType dtype, std::uint64_t value) {
  std::string data(ItemSize(dtype), '\0');
  Store(dtype, value, &data[0]);
  return Raw(dtype, {}, std::move(data), Kind::kScalar);
}

Value Value::ScalarFloat(DType dtype, double value) {
  std::string data(ItemSize(dtype), '\0');
  Store(dtype, value, &data[0]);
  return Raw(dtype, {}, std::move(data), Kind::kScalar);
}

Status Value::ScalarFromBytes(DType dtype, std::string_view bytes, Value* out) {
  if (bytes.size() != ItemSize(dtype)) {
    return Status::Error(StatusCode::kInvalidArgument, "a scalar of dtype " + std::string(DTypeName(dtype)) +
                                                           " needs " + std::to_string(ItemSize(dtype)) +
                                                           " bytes, got " + std::to_string(bytes.size()));
  }
  *out = Raw(dtype, {}, std::string(bytes), Kind::kScalar);
  return Status::Ok();
}

Status Value::ObjectArray(Shape shape, Items items, Value* out) {
  std::size_t count = 0;
  if (shape.size() > 32 || !ShapeSize(shape, &count) || count != items.size()) {
    return Status::Error(StatusCode::kInvalidArgument, "'o' array item count does not match its shape");
  }
  Value v;
  v.kind_ = Kind::kObjectArray;
  v.shape_ = std::move(shape);
  v.items_ = std::move(items);
  *out = std::move(v);
  return Status::Ok();
}

Value Value::Graph(Value nodes, Value edges, Value edge_links) {
  Value v;
  v.kind_ = Kind::kGraph;
  v.items_.push_back(std::move(nodes));
  v.items_.push_back(std::move(edges));
  v.items_.push_back(std::move(edge_links));
  return v;
}

// -- inspection -------------------------------------------------------------------------------------

std::size_t Value::element_count() const {
  if (kind_ == Kind::kScalar) return 1;
  if (kind_ != Kind::kArray) return 0;
  return text_.size() / ItemSize(dtype_);
}

const Value* Value::Find(std::string_view key) const {
  if (kind_ == Kind::kDict) {
    for (const auto& entry : entries_) {
      if (entry.first == key) return &entry.second;
    }
  } else if (kind_ == Kind::kPairDict) {
    for (const auto& pair : pairs_) {
      if (pair.first.kind() == Kind::kString && pair.first.text() == key) return &pair.second;
    }
  }
  return nullptr;
}

Value& Value::Set(std::string key, Value value) {
  for (auto& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return entry.second;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return entries_.back().second;
}

double Value::ElementAsDouble(std::size_t index) const {
  switch (dtype_) {
    case DType::kBool: return Load<std::uint8_t>(text_, index) != 0 ? 1.0 : 0.0;
    case DType::kInt8: return Load<std::int8_t>(text_, index);
    case DType::kInt16: return Load<std::int16_t>(text_, index);
    case DType::kInt32: return Load<std::int32_t>(text_, index);
    case DType::kInt64: return static_cast<double>(Load<std::int64_t>(text_, index));
    case DType::kUInt8: return Load<std::uint8_t>(text_, index);
    case DType::kUInt16: return Load<std::uint16_t>(text_, index);
    case DType::kUInt32: return Load<std::uint32_t>(text_, index);
    case DType::kUInt64: return static_cast<double>(Load<std::uint64_t>(text_, index));
    case DType::kFloat32: return Load<float>(text_, index);
    case DType::kFloat64: return Load<double>(text_, index);
  }
  return 0.0;
}

std::int64_t Value::ElementAsInt64(std::size_t index) const {
  switch (dtype_) {
    case DType::kBool: return Load<std::uint8_t>(text_, index) != 0 ? 1 : 0;
    case DType::kInt8: return Load<std::int8_t>(text_, index);
    case DType::kInt16: return Load<std::int16_t>(text_, index);
    case DType::kInt32: return Load<std::int32_t>(text_, index);
    case DType::kInt64: return Load<std::int64_t>(text_, index);
    case DType::kUInt8: return Load<std::uint8_t>(text_, index);
    case DType::kUInt16: return Load<std::uint16_t>(text_, index);
    case DType::kUInt32: return Load<std::uint32_t>(text_, index);
    case DType::kUInt64: return static_cast<std::int64_t>(Load<std::uint64_t>(text_, index));
    case DType::kFloat32: return TruncateToInt64(Load<float>(text_, index));
    case DType::kFloat64: return TruncateToInt64(Load<double>(text_, index));
  }
  return 0;
}

namespace {

// Python's int() of a float, within the signed 64-bit range (CONFORMANCE.md §1.4).
Status FloatToInt64(double number, std::int64_t* out) {
  if (!std::isfinite(number)) return ValueError("cannot convert float " + FloatRepr(number) + " to an integer");
  if (!(number >= -9223372036854775808.0 && number < 9223372036854775808.0)) {
    return ValueError("the float " + FloatRepr(number) + " is outside the signed 64-bit range");
  }
  *out = static_cast<std::int64_t>(number);
  return Status::Ok();
}

}  // namespace

Status Value::ToInt64(std::int64_t* out) const {
  switch (kind_) {
    case Kind::kBool: *out = bool_ ? 1 : 0; return Status::Ok();
    case Kind::kInt: *out = int_; return Status::Ok();
    case Kind::kBigInt: return ValueError("the int " + Repr() + " is outside the signed 64-bit range");
    case Kind::kFloat: return FloatToInt64(float_, out);
    case Kind::kScalar:
    case Kind::kArray:
      if (kind_ == Kind::kArray && element_count() != 1) {
        return TypeError("only arrays of one element can be converted to Python scalars");
      }
      if (dtype_ == DType::kFloat32 || dtype_ == DType::kFloat64) return FloatToInt64(ElementAsDouble(0), out);
      if (dtype_ == DType::kUInt64 && Load<std::uint64_t>(text_, 0) > 9223372036854775807ull) {
        return ValueError("the int " + std::to_string(Load<std::uint64_t>(text_, 0)) +
                          " is outside the signed 64-bit range");
      }
      *out = ElementAsInt64(0);
      return Status::Ok();
    default:
      return TypeError("int() argument must be a number, not '" + TypeName() + "'");
  }
}

Status Value::ToDouble(double* out) const {
  switch (kind_) {
    case Kind::kBool: *out = bool_ ? 1.0 : 0.0; return Status::Ok();
    case Kind::kInt: *out = static_cast<double>(int_); return Status::Ok();
    case Kind::kFloat: *out = float_; return Status::Ok();
    case Kind::kScalar: *out = ElementAsDouble(0); return Status::Ok();
    case Kind::kArray:
      if (element_count() == 1) {
        *out = ElementAsDouble(0);
        return Status::Ok();
      }
      return TypeError("only arrays of one element can be converted to Python scalars");
    default:
      return TypeError("float() argument must be a number, not '" + TypeName() + "'");
  }
}

Status Value::ToDoubles(std::vector<double>* out) const {
  switch (kind_) {
    case Kind::kArray:
    case Kind::kScalar:
      for (std::size_t i = 0; i < element_count(); ++i) out->push_back(ElementAsDouble(i));
      return Status::Ok();
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& item : items_) GYM_REMOTE_RETURN_IF_ERROR(item.ToDoubles(out));
      return Status::Ok();
    default: {
      double number = 0;
      GYM_REMOTE_RETURN_IF_ERROR(ToDouble(&number));
      out->push_back(number);
      return Status::Ok();
    }
  }
}

Status Value::ToInt64s(std::vector<std::int64_t>* out) const {
  switch (kind_) {
    case Kind::kArray:
    case Kind::kScalar:
      for (std::size_t i = 0; i < element_count(); ++i) out->push_back(ElementAsInt64(i));
      return Status::Ok();
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& item : items_) GYM_REMOTE_RETURN_IF_ERROR(item.ToInt64s(out));
      return Status::Ok();
    default: {
      std::int64_t number = 0;
      GYM_REMOTE_RETURN_IF_ERROR(ToInt64(&number));
      out->push_back(number);
      return Status::Ok();
    }
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kNull: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt:
    case Kind::kBigInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict:
    case Kind::kPairDict: return "dict";
    case Kind::kArray:
    case Kind::kObjectArray: return "numpy.ndarray";
    case Kind::kScalar: return std::string("numpy.") + DTypeName(dtype_);
    case Kind::kGraph: return "GraphInstance";
  }
  return "?";
}

bool Value::Hashable() const {
  switch (kind_) {
    case Kind::kList:
    case Kind::kDict:
    case Kind::kPairDict:
    case Kind::kArray:
    case Kind::kObjectArray: return false;
    case Kind::kTuple:
    case Kind::kGraph:
      for (const Value& item : items_) {
        if (!item.Hashable()) return false;
      }
      return true;
    default: return true;
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kNull: return "None";
    case Kind::kBool: return bool_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kBigInt: return (text_[0] == '-' ? "-0x" + text_.substr(1) : "0x" + text_);
    case Kind::kFloat: return FloatRepr(float_);
    case Kind::kString: return PythonString(text_);
    case Kind::kBytes: return PythonBytes(text_);
    case Kind::kList:
    case Kind::kTuple: {
      const bool list = kind_ == Kind::kList;
      std::string out = list ? "[" : "(";
      for (std::size_t i = 0; i < items_.size(); ++i) out += (i ? ", " : "") + items_[i].Repr();
      if (!list && items_.size() == 1) out += ",";
      return out + (list ? "]" : ")");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (std::size_t i = 0; i < entries_.size(); ++i) {
        out += (i ? ", " : "") + PythonString(entries_[i].first) + ": " + entries_[i].second.Repr();
      }
      return out + "}";
    }
    case Kind::kPairDict: {
      std::string out = "{";
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        out += (i ? ", " : "") + pairs_[i].first.Repr() + ": " + pairs_[i].second.Repr();
      }
      return out + "}";
    }
    case Kind::kArray: {
      std::string out = "array([";
      const std::size_t count = element_count();
      for (std::size_t i = 0; i < count && i < 8; ++i) {
        out += i ? ", " : "";
        out += IsFloat(dtype_) ? FloatRepr(ElementAsDouble(i))
                               : (dtype_ == DType::kBool ? (ElementAsInt64(i) ? "True" : "False")
                                                         : std::to_string(ElementAsInt64(i)));
      }
      if (count > 8) out += ", ...";
      return out + "], dtype=" + DTypeName(dtype_) + ")";
    }
    case Kind::kScalar: {
      std::string number = IsFloat(dtype_) ? FloatRepr(ElementAsDouble(0))
                           : dtype_ == DType::kBool
                               ? (ElementAsInt64(0) ? "True" : "False")
                               : (dtype_ == DType::kUInt64 ? std::to_string(static_cast<std::uint64_t>(
                                                                 ElementAsInt64(0)))
                                                           : std::to_string(ElementAsInt64(0)));
      return std::string("np.") + DTypeName(dtype_) + "(" + number + ")";
    }
    case Kind::kObjectArray: return "array([...], dtype=object)";
    case Kind::kGraph:
      return "GraphInstance(nodes=" + items_[0].Repr() + ", edges=" + items_[1].Repr() +
             ", edge_links=" + items_[2].Repr() + ")";
  }
  return "?";
}

bool Value::operator==(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kNull: return true;
    case Kind::kBool: return bool_ == other.bool_;
    case Kind::kInt: return int_ == other.int_;
    case Kind::kFloat: return SameBits(float_, other.float_);
    case Kind::kBigInt:
    case Kind::kString:
    case Kind::kBytes: return text_ == other.text_;
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kGraph: return items_ == other.items_;
    case Kind::kDict: return entries_ == other.entries_;
    case Kind::kPairDict: return pairs_ == other.pairs_;
    case Kind::kArray:
    case Kind::kScalar: return dtype_ == other.dtype_ && shape_ == other.shape_ && text_ == other.text_;
    case Kind::kObjectArray: return shape_ == other.shape_ && items_ == other.items_;
  }
  return false;
}

}  // namespace gym_remote
