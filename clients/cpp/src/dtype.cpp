#include "gym_remote/dtype.hpp"

#include <limits>

namespace gym_remote {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* str;
  const char* name;
  std::size_t itemsize;
  char kind;  // numpy's dtype.kind: b, i, u, f
  const char* codes;  // numpy's one-character codes for this dtype on Linux x86-64 / aarch64
};

constexpr DTypeInfo kInfos[] = {
    {DType::kBool, "|b1", "bool", 1, 'b', "?"},
    {DType::kInt8, "|i1", "int8", 1, 'i', "b"},
    {DType::kInt16, "<i2", "int16", 2, 'i', "h"},
    {DType::kInt32, "<i4", "int32", 4, 'i', "i"},
    {DType::kInt64, "<i8", "int64", 8, 'i', "lq"},
    {DType::kUInt8, "|u1", "uint8", 1, 'u', "B"},
    {DType::kUInt16, "<u2", "uint16", 2, 'u', "H"},
    {DType::kUInt32, "<u4", "uint32", 4, 'u', "I"},
    {DType::kUInt64, "<u8", "uint64", 8, 'u', "LQ"},
    {DType::kFloat32, "<f4", "float32", 4, 'f', "f"},
    {DType::kFloat64, "<f8", "float64", 8, 'f', "d"},
};

const DTypeInfo& Info(DType dtype) { return kInfos[static_cast<int>(dtype)]; }

}  // namespace

const std::vector<DType>& AllDTypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> dtypes;
    for (const DTypeInfo& info : kInfos) dtypes.push_back(info.dtype);
    return dtypes;
  }();
  return all;
}

const char* DTypeStr(DType dtype) { return Info(dtype).str; }
const char* DTypeName(DType dtype) { return Info(dtype).name; }
std::size_t ItemSize(DType dtype) { return Info(dtype).itemsize; }
bool IsFloat(DType dtype) { return Info(dtype).kind == 'f'; }
bool IsSignedInt(DType dtype) { return Info(dtype).kind == 'i'; }
bool IsUnsignedInt(DType dtype) { return Info(dtype).kind == 'u'; }

bool ParseDType(std::string_view text, DType* dtype, std::string* why) {
  auto fail = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (text.empty() || text.size() > 24) return fail("bad dtype");
  for (const DTypeInfo& info : kInfos) {
    if (text == info.name) {
      *dtype = info.dtype;
      return true;
    }
  }
  if (text == "int" || text == "int_") {  // numpy's default integer on 64-bit Linux
    *dtype = DType::kInt64;
    return true;
  }
  if (text == "float" || text == "double") {
    *dtype = DType::kFloat64;
    return true;
  }
  if (text == "uint") {
    *dtype = DType::kUInt64;
    return true;
  }
  char order = '=';
  std::string_view rest = text;
  if (rest[0] == '<' || rest[0] == '>' || rest[0] == '=' || rest[0] == '|') {
    order = rest[0];
    rest.remove_prefix(1);
  }
  if (rest.empty()) return fail("bad dtype");
  if (rest.size() == 1) {  // a one-character code
    for (const DTypeInfo& info : kInfos) {
      for (const char* code = info.codes; *code != '\0'; ++code) {
        if (rest[0] == *code) {
          if (order == '>' && info.itemsize > 1) break;
          *dtype = info.dtype;
          return true;
        }
      }
    }
    return fail("dtype '" + std::string(text) + "' is not supported by this client (it handles bool, int8-64, "
                "uint8-64, float32 and float64)");
  }
  char kind = rest[0];
  std::string_view digits = rest.substr(1);
  std::size_t size = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || size > 1000) return fail("bad dtype '" + std::string(text) + "'");
    size = size * 10 + static_cast<std::size_t>(c - '0');
  }
  for (const DTypeInfo& info : kInfos) {
    if (info.kind == kind && info.itemsize == size) {
      if (order == '>' && size > 1) {
        return fail("dtype '" + std::string(text) + "' is big-endian, which this client does not support");
      }
      *dtype = info.dtype;
      return true;
    }
  }
  return fail("dtype '" + std::string(text) + "' is not supported by this client (it handles bool, int8-64, "
              "uint8-64, float32 and float64)");
}

bool ShapeSize(const Shape& shape, std::size_t* size) {
  std::size_t total = 1;
  for (std::int64_t dimension : shape) {
    if (dimension < 0) return false;
    const auto d = static_cast<std::size_t>(dimension);
    if (d != 0 && total > std::numeric_limits<std::size_t>::max() / d) return false;
    total *= d;
  }
  *size = total;
  return true;
}

}  // namespace gym_remote
