// The numpy dtypes this client handles (PROTOCOL.md §3.4): bool, signed and unsigned integers of
// 1, 2, 4 and 8 bytes, float32 and float64, all little-endian. Other dtypes (float16, complex,
// strings, datetimes, big-endian data) are refused with a clear error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gym_remote {

enum class DType : std::uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat32,
  kFloat64,
};

// All supported dtypes, in the order HELLO's "dtypes" lists them.
const std::vector<DType>& AllDTypes();

// numpy's dtype.str: "|b1", "|i1", "<i2", ..., "<f8".
const char* DTypeStr(DType dtype);
// numpy's dtype name: "bool", "int8", ..., "float64".
const char* DTypeName(DType dtype);
std::size_t ItemSize(DType dtype);
bool IsFloat(DType dtype);
bool IsSignedInt(DType dtype);
bool IsUnsignedInt(DType dtype);

// Parses a dtype string from the wire or from a user: numpy's dtype.str ("<f4"), with the byte-order
// marks numpy accepts for these dtypes ("=f4", "f4", "|u1", "<u1"), plain names ("float32", "uint8",
// "bool") and single-character codes ("f", "d", "?", "B", ...). Returns false for anything else;
// `why` (if given) then says why.
bool ParseDType(std::string_view text, DType* dtype, std::string* why = nullptr);

// The shape of an array: non-negative dimensions, at most 32 (PROTOCOL.md §3.2).
using Shape = std::vector<std::int64_t>;

// prod(shape), or false if a dimension is negative or the product overflows.
bool ShapeSize(const Shape& shape, std::size_t* size);

}  // namespace gym_remote
