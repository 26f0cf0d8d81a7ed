// A value of the protocol (PROTOCOL.md §3): what infos, options, CALL results and space descriptions
// are made of. It mirrors the Python types the protocol carries, so that a value survives a round
// trip exactly (an int stays an int, a numpy float32 scalar stays one, a tuple stays a tuple).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gym_remote/dtype.hpp"
#include "gym_remote/status.hpp"

namespace gym_remote {

class Value {
 public:
  enum class Kind {
    kNull,         // None
    kBool,         // bool
    kInt,          // int in the signed 64-bit range
    kBigInt,       // int outside it: lowercase hex text with an optional '-' (tag "i")
    kFloat,        // float (any double, NaN and infinities included)
    kString,       // str, as UTF-8
    kBytes,        // bytes (tag "b")
    kList,         // list (tag "l")
    kTuple,        // tuple (tag "t")
    kDict,         // dict with str keys, in insertion order (a JSON object)
    kPairDict,     // dict whose keys are not all str (tag "d")
    kArray,        // numpy array of a supported dtype (tag "a")
    kScalar,       // numpy scalar of a supported dtype (tags "s", "S")
    kObjectArray,  // numpy array of dtype object (tag "o"): shape and items
    kGraph,        // gymnasium.spaces.GraphInstance (tag "g"): items() holds nodes, edges, edge_links
  };
  using Items = std::vector<Value>;
  using Entries = std::vector<std::pair<std::string, Value>>;
  using Pairs = std::vector<std::pair<Value, Value>>;

  Value() = default;  // None

  // -- construction --------------------------------------------------------------------------------
  static Value None() { return Value(); }
  static Value Bool(bool value);
  static Value Int(std::int64_t value);
  // An int given as hex text ("-1f"); one within the signed 64-bit range becomes kInt. Fails for text
  // that is not -?[0-9a-f]+.
  static Status BigIntFromHex(std::string_view hex, Value* out);
  // An int given as decimal text ("18446744073709551617"), e.g. a JSON literal out of int64 range.
  static Status IntFromDecimal(std::string_view decimal, Value* out);
  static Value UInt(std::uint64_t value);  // an int: kInt, or kBigInt above the int64 range
  static Value Float(double value);
  static Value String(std::string utf8);
  static Value Bytes(std::string data);
  static Value List(Items items = {});
  static Value Tuple(Items items = {});
  static Value Dict(Entries entries = {});
  static Value PairDict(Pairs pairs);
  // A numpy array; `data` holds prod(shape) * itemsize bytes, C order, little-endian.
  static Status Array(DType dtype, Shape shape, std::string data, Value* out);
  // A numpy array from C++ numbers (converted to `dtype` as a C cast would).
  template <typename T>
  static Value ArrayOf(DType dtype, Shape shape, const std::vector<T>& numbers);
  // Numpy scalars: np.bool_, np.intXX / np.uintXX (from int64 or uint64), np.floatXX.
  static Value ScalarBool(bool value);
  static Value ScalarInt(DType dtype, std::int64_t value);
  static Value ScalarUInt(DType dtype, std::uint64_t value);
  static Value ScalarFloat(DType dtype, double value);
  // A numpy scalar from its itemsize bytes.
  static Status ScalarFromBytes(DType dtype, std::string_view bytes, Value* out);
  static Status ObjectArray(Shape shape, Items items, Value* out);
  static Value Graph(Value nodes, Value edges, Value edge_links);

  // -- inspection ----------------------------------------------------------------------------------
  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNull; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kPairDict; }
  // Python's `type(x) is int`: kInt or kBigInt.
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBigInt; }

  bool as_bool() const { return bool_; }               // kBool
  std::int64_t as_int() const { return int_; }         // kInt
  double as_float() const { return float_; }           // kFloat
  const std::string& text() const { return text_; }    // kString (UTF-8), kBigInt (hex), kBytes, kArray/kScalar data
  const Items& items() const { return items_; }        // kList, kTuple, kObjectArray, kGraph (3 parts)
  Items& items() { return items_; }
  const Entries& entries() const { return entries_; }  // kDict
  Entries& entries() { return entries_; }
  const Pairs& pairs() const { return pairs_; }        // kPairDict
  DType dtype() const { return dtype_; }               // kArray, kScalar
  const Shape& shape() const { return shape_; }        // kArray, kObjectArray
  const std::string& data() const { return text_; }    // kArray, kScalar: the raw little-endian bytes
  std::size_t element_count() const;                   // kArray: prod(shape); kScalar: 1

  // kDict (and a kPairDict's str keys): the value of `key`, or nullptr.
  const Value* Find(std::string_view key) const;
  // kDict: sets `key` (replacing its value in place, as a Python dict does), returns the value.
  Value& Set(std::string key, Value value);
  // kList, kTuple: appends.
  void Append(Value value) { items_.push_back(std::move(value)); }

  // -- numbers -------------------------------------------------------------------------------------
  // kArray / kScalar element `index` as a number (no checks beyond the kind).
  double ElementAsDouble(std::size_t index) const;
  std::int64_t ElementAsInt64(std::size_t index) const;  // floats truncate toward zero (saturating)
  // One number, as Python's int() / float() take it: bool, int, float, a numpy scalar, or an array of
  // exactly one element. Int64 truncates floats toward zero (Python's int()) and refuses (ValueError) a
  // NaN, an infinity or a number outside the signed 64-bit range.
  Status ToInt64(std::int64_t* out) const;
  Status ToDouble(double* out) const;
  // All numbers of an array, a numpy scalar, a number, or (nested) lists and tuples of them, in C
  // order, as np.asarray(x).ravel() lists them.
  Status ToDoubles(std::vector<double>* out) const;
  Status ToInt64s(std::vector<std::int64_t>* out) const;

  // Python's repr() of the value, for error messages (arrays abbreviated).
  std::string Repr() const;
  // Python's type name: "int", "float", "str", "numpy.ndarray", "numpy.float32", ...
  std::string TypeName() const;
  // Whether a Python dict could use it as a key.
  bool Hashable() const;

  // Structural equality: same kinds, same contents; floats compare by bits (NaN equals NaN).
  bool operator==(const Value& other) const;
  bool operator!=(const Value& other) const { return !(*this == other); }

 private:
  static Value Raw(DType dtype, Shape shape, std::string data, Kind kind);
  template <typename T>
  static void Store(DType dtype, T number, char* out);

  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  std::int64_t int_ = 0;
  double float_ = 0.0;
  std::string text_;
  DType dtype_ = DType::kFloat64;
  Shape shape_;
  Items items_;
  Entries entries_;
  Pairs pairs_;
};

// -- templates ----------------------------------------------------------------------------------

template <typename T>
void Value::Store(DType dtype, T number, char* out) {
  auto put = [out](auto typed) { std::memcpy(out, &typed, sizeof(typed)); };
  if constexpr (std::is_floating_point_v<T>) {
    if (!IsFloat(dtype) && dtype != DType::kBool) {  // truncate toward zero, saturating: never undefined
      const double d = static_cast<double>(number);
      const std::int64_t whole = d != d ? 0
                                 : d >= 9223372036854775807.0  ? INT64_MAX
                                 : d <= -9223372036854775808.0 ? INT64_MIN
                                                               : static_cast<std::int64_t>(d);
      Store(dtype, whole, out);
      return;
    }
  }
  switch (dtype) {
    case DType::kBool: put(static_cast<std::uint8_t>(number != 0)); break;
    case DType::kInt8: put(static_cast<std::int8_t>(number)); break;
    case DType::kInt16: put(static_cast<std::int16_t>(number)); break;
    case DType::kInt32: put(static_cast<std::int32_t>(number)); break;
    case DType::kInt64: put(static_cast<std::int64_t>(number)); break;
    case DType::kUInt8: put(static_cast<std::uint8_t>(number)); break;
    case DType::kUInt16: put(static_cast<std::uint16_t>(number)); break;
    case DType::kUInt32: put(static_cast<std::uint32_t>(number)); break;
    case DType::kUInt64: put(static_cast<std::uint64_t>(number)); break;
    case DType::kFloat32: put(static_cast<float>(number)); break;
    case DType::kFloat64: put(static_cast<double>(number)); break;
  }
}

template <typename T>
Value Value::ArrayOf(DType dtype, Shape shape, const std::vector<T>& numbers) {
  const std::size_t itemsize = ItemSize(dtype);
  std::string data(numbers.size() * itemsize, '\0');
  for (std::size_t i = 0; i < numbers.size(); ++i) Store(dtype, numbers[i], &data[i * itemsize]);
  return Raw(dtype, std::move(shape), std::move(data), Kind::kArray);
}

}  // namespace gym_remote
