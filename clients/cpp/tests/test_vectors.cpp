// Checks the C++ codec and frames against docs/test-vectors.json (its format: docs/TEST-VECTORS.md).
//
//   gym_remote_test_vectors PATH/TO/test-vectors.json
//
// Every vector is checked; a vector marked "optional" may fail only where it uses something this
// client does not support (PROTOCOL.md §3.4, §11): it is then counted as skipped. A section or a value
// type this runner does not know fails, so that nothing passes unchecked.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gym_remote/codec.hpp"
#include "gym_remote/protocol.hpp"
#include "gym_remote/spaces.hpp"
#include "text.hpp"

using gym_remote::Hex;
using gym_remote::Unhex;
using gym_remote::DType;
using gym_remote::Status;
using gym_remote::Value;
using json = nlohmann::json;

namespace {

int g_passed = 0, g_failed = 0, g_skipped = 0;

void AppendUtf8(std::uint32_t code_point, std::string* out) {
  if (code_point >= 0xD800 && code_point <= 0xDFFF) code_point = 0xFFFD;  // a lone surrogate, as we read it
  if (code_point < 0x80) {
    *out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    *out += static_cast<char>(0xC0 | (code_point >> 6));
    *out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    *out += static_cast<char>(0xE0 | (code_point >> 12));
    *out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (code_point >> 18));
    *out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

double ParseFloat(const std::string& text) {
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  return std::strtod(text.c_str(), nullptr);
}

// A value description of the file as a Value. `lossy` is set for strings with lone surrogates (read
// here as U+FFFD), whose encoding then differs from the canonical body.
Status FromDescription(const json& d, Value* out, bool* lossy) {
  const std::string type = d.at("type").get<std::string>();
  auto items = [&](const json& list, Value::Items* values) -> Status {
    for (const json& item : list) {
      Value value;
      GYM_REMOTE_RETURN_IF_ERROR(FromDescription(item, &value, lossy));
      values->push_back(std::move(value));
    }
    return Status::Ok();
  };
  auto dtype_of = [](const json& name, DType* dtype) -> Status {
    std::string why;
    if (!gym_remote::ParseDType(name.get<std::string>(), dtype, &why)) return Status(gym_remote::StatusCode::kInvalidArgument, why);
    return Status::Ok();
  };
  if (type == "none") {
    *out = Value();
  } else if (type == "bool") {
    *out = Value::Bool(d.at("value").get<bool>());
  } else if (type == "int") {
    return Value::IntFromDecimal(d.at("value").get<std::string>(), out);
  } else if (type == "float") {
    *out = Value::Float(ParseFloat(d.at("value").get<std::string>()));
  } else if (type == "str") {
    if (d.contains("codepoints")) {
      std::string text;
      for (const json& code_point : d.at("codepoints")) {
        const auto c = code_point.get<std::uint32_t>();
        *lossy = *lossy || (c >= 0xD800 && c <= 0xDFFF);
        AppendUtf8(c, &text);
      }
      *out = Value::String(text);
    } else {
      *out = Value::String(d.at("value").get<std::string>());
    }
  } else if (type == "bytes") {
    *out = Value::Bytes(Unhex(d.at("hex").get<std::string>()));
  } else if (type == "list" || type == "tuple") {
    Value::Items values;
    GYM_REMOTE_RETURN_IF_ERROR(items(d.at("items"), &values));
    *out = type == "list" ? Value::List(std::move(values)) : Value::Tuple(std::move(values));
  } else if (type == "dict") {
    Value::Pairs pairs;
    for (const json& pair : d.at("items")) {
      Value key, value;
      GYM_REMOTE_RETURN_IF_ERROR(FromDescription(pair.at(0), &key, lossy));
      GYM_REMOTE_RETURN_IF_ERROR(FromDescription(pair.at(1), &value, lossy));
      pairs.emplace_back(std::move(key), std::move(value));
    }
    *out = pairs.empty() ? Value::Dict() : Value::PairDict(std::move(pairs));
  } else if (type == "ndarray") {
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(dtype_of(d.at("dtype"), &dtype));
    return Value::Array(dtype, d.at("shape").get<gym_remote::Shape>(), Unhex(d.at("hex").get<std::string>()), out);
  } else if (type == "object_array") {
    Value::Items values;
    GYM_REMOTE_RETURN_IF_ERROR(items(d.at("items"), &values));
    return Value::ObjectArray(d.at("shape").get<gym_remote::Shape>(), std::move(values), out);
  } else if (type == "numpy_scalar") {
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(dtype_of(d.at("dtype"), &dtype));
    if (d.contains("hex")) return Value::ScalarFromBytes(dtype, Unhex(d.at("hex").get<std::string>()), out);
    const json& value = d.at("value");
    if (value.is_boolean()) {
      *out = Value::ScalarBool(value.get<bool>());
    } else if (gym_remote::IsFloat(dtype)) {
      *out = Value::ScalarFloat(dtype, ParseFloat(value.get<std::string>()));
    } else if (gym_remote::IsUnsignedInt(dtype)) {
      *out = Value::ScalarUInt(dtype, std::strtoull(value.get<std::string>().c_str(), nullptr, 10));
    } else {
      *out = Value::ScalarInt(dtype, std::strtoll(value.get<std::string>().c_str(), nullptr, 10));
    }
  } else if (type == "graph") {
    Value parts[3];
    const char* names[] = {"nodes", "edges", "edge_links"};
    for (int i = 0; i < 3; ++i) GYM_REMOTE_RETURN_IF_ERROR(FromDescription(d.at(names[i]), &parts[i], lossy));
    *out = Value::Graph(std::move(parts[0]), std::move(parts[1]), std::move(parts[2]));
  } else if (type == "nested") {
    GYM_REMOTE_RETURN_IF_ERROR(FromDescription(d.at("innermost"), out, lossy));
    const bool list = d.at("container").get<std::string>() == "list";
    for (int level = 0; level < d.at("levels").get<int>(); ++level) {
      *out = list ? Value::List({*out}) : Value::Dict({{d.at("key").get<std::string>(), *out}});
    }
  } else {
    return Status(gym_remote::StatusCode::kInvalidArgument, "unknown value type '" + type + "'");
  }
  return Status::Ok();
}

std::vector<std::string> Buffers(const json& vector) {
  std::vector<std::string> buffers;
  for (const json& hex : vector.value("buffers", json::array())) buffers.push_back(Unhex(hex.get<std::string>()));
  return buffers;
}

std::string Body(const json& vector) {
  return vector.contains("body_hex") ? Unhex(vector.at("body_hex").get<std::string>()) : vector.at("body").get<std::string>();
}

Status Decode(const json& vector, Value* value) {
  const std::vector<std::string> buffers = Buffers(vector);
  std::vector<std::string_view> views(buffers.begin(), buffers.end());
  return gym_remote::DecodeValue(Body(vector), views, value);
}

// Records one vector's outcome: `problem` empty is a pass; an optional vector's problem is a skip.
void Record(const json& vector, const std::string& section, const std::string& problem) {
  if (problem.empty()) {
    ++g_passed;
  } else if (vector.value("optional", false)) {
    ++g_skipped;
    std::printf("skip %s/%s (optional): %s\n", section.c_str(), vector.at("name").get<std::string>().c_str(),
                problem.substr(0, 160).c_str());
  } else {
    ++g_failed;
    std::printf("FAIL %s/%s: %s\n", section.c_str(), vector.at("name").get<std::string>().c_str(), problem.c_str());
  }
}

std::string CheckValue(const json& vector) {
  Value expected, decoded;
  bool lossy = false;
  Status status = FromDescription(vector.at("value"), &expected, &lossy);
  if (!status.ok()) return "cannot represent the value: " + status.message();
  status = Decode(vector, &decoded);
  if (!status.ok()) return "decoding failed: " + status.message();
  if (decoded != expected) return "decoded " + decoded.Repr().substr(0, 200) + ", expected " + expected.Repr().substr(0, 200);
  if (vector.value("canonical", false) && !lossy) {
    gym_remote::EncodedValue encoded;
    status = gym_remote::EncodeValue(expected, &encoded);
    if (!status.ok()) return "encoding failed: " + status.message();
    if (encoded.body != Body(vector)) return "encoded body " + encoded.body.substr(0, 200);
    std::vector<std::string> buffers(encoded.buffers.begin(), encoded.buffers.end());
    if (buffers != Buffers(vector)) return "encoded buffers differ";
  }
  return "";
}

std::string CheckRejected(const json& vector) {
  Value decoded;
  Status status = Decode(vector, &decoded);
  return status.ok() ? "accepted, decoded " + decoded.Repr().substr(0, 120) : "";
}

std::string CheckHeader(const json& vector, bool rejected) {
  gym_remote::Header header;
  Status status = gym_remote::ParseHeader(Unhex(vector.at("hex").get<std::string>()), &header);
  if (rejected) return status.ok() ? "accepted" : "";
  if (!status.ok()) return status.message();
  const bool same = header.version == vector.at("version").get<int>() && header.kind == vector.at("kind").get<int>() &&
                    header.flags == vector.at("flags").get<int>() && header.count == vector.at("count").get<int>() &&
                    header.seq == std::stoull(vector.at("seq").get<std::string>());
  if (!same) return "parsed other fields";
  if (vector.value("canonical", false) && header.version == gym_remote::kProtocolVersion) {
    const std::string packed = gym_remote::PackHeader(static_cast<gym_remote::MessageKind>(header.kind), header.seq,
                                                      header.count, header.flags);
    if (Hex(packed) != vector.at("hex").get<std::string>()) return "packed " + Hex(packed);
  }
  return "";
}

std::string CheckIndexFrame(const json& vector, bool rejected) {
  std::vector<std::size_t> indexes;
  Status status = gym_remote::ParseIndexFrame(Unhex(vector.at("hex").get<std::string>()),
                                              static_cast<std::uint16_t>(vector.at("count").get<int>()),
                                              vector.at("hosted").get<std::size_t>(), &indexes);
  if (rejected) return status.ok() ? "accepted" : "";
  if (!status.ok()) return status.message();
  if (indexes != vector.at("indexes").get<std::vector<std::size_t>>()) return "other indexes";
  if (Hex(gym_remote::PackIndexFrame(indexes)) != vector.at("hex").get<std::string>()) return "packed differently";
  return "";
}

std::string CheckResultScalars(const json& vector, bool rejected) {
  gym_remote::Header header;
  std::vector<double> rewards;
  std::vector<bool> terminated, truncated;
  Status status = gym_remote::ParseResultFrame(Unhex(vector.at("hex").get<std::string>()), vector.at("count").get<std::size_t>(),
                                               &header, &rewards, &terminated, &truncated);
  if (rejected) return status.ok() ? "accepted" : "";
  if (!status.ok()) return status.message();
  std::vector<double> expected_rewards;
  for (const json& reward : vector.at("rewards")) expected_rewards.push_back(ParseFloat(reward.get<std::string>()));
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    if (!(rewards[i] == expected_rewards[i] || (std::isnan(rewards[i]) && std::isnan(expected_rewards[i])))) {
      return "other rewards";
    }
  }
  if (terminated != vector.at("terminated").get<std::vector<bool>>() ||
      truncated != vector.at("truncated").get<std::vector<bool>>() ||
      header.seq != std::stoull(vector.at("seq").get<std::string>()) || header.flags != vector.at("flags").get<int>()) {
    return "other fields";
  }
  const std::string packed = gym_remote::PackResultFrame(header.seq, header.flags, rewards, terminated, truncated);
  if (Hex(packed) != vector.at("hex").get<std::string>()) return "packed " + Hex(packed);
  return "";
}

std::string CheckStepDtypes(const json& vector, bool rejected) {
  const std::string frame = Unhex(vector.at("header").get<std::string>()) + vector.at("listing").get<std::string>();
  std::vector<DType> dtypes;
  Status status = gym_remote::ParseStepDtypes(frame, vector.at("leaves").get<std::size_t>(), &dtypes);
  if (rejected) return status.ok() ? "accepted" : "";
  if (!status.ok()) return status.message();
  std::vector<std::string> names;
  for (DType dtype : dtypes) names.push_back(gym_remote::DTypeStr(dtype));
  if (names != vector.at("dtypes").get<std::vector<std::string>>()) return "other dtypes";
  return "";
}

// The `space` of a spaces vector as a description Value (arrays as ndarray descriptions there).
Status SpaceDescription(const json& d, Value* out, bool* lossy) {
  if (d.is_object() && d.contains("type")) return FromDescription(d, out, lossy);
  if (d.is_object()) {
    Value dict = Value::Dict();
    for (const auto& [key, item] : d.items()) {
      Value value;
      GYM_REMOTE_RETURN_IF_ERROR(SpaceDescription(item, &value, lossy));
      dict.Set(key, std::move(value));
    }
    *out = std::move(dict);
  } else if (d.is_array()) {
    Value list = Value::List();
    for (const json& item : d) {
      Value value;
      GYM_REMOTE_RETURN_IF_ERROR(SpaceDescription(item, &value, lossy));
      list.Append(std::move(value));
    }
    *out = std::move(list);
  } else if (d.is_string()) {
    *out = Value::String(d.get<std::string>());
  } else if (d.is_boolean()) {
    *out = Value::Bool(d.get<bool>());
  } else if (d.is_number_integer()) {
    *out = Value::Int(d.get<std::int64_t>());
  } else if (d.is_null()) {
    *out = Value();
  } else {
    return Status(gym_remote::StatusCode::kInvalidArgument, "unexpected JSON in a space");
  }
  return Status::Ok();
}

std::string CheckSpace(const json& vector) {
  Value description, expected_description;
  bool lossy = false;
  Status status = Decode(vector, &description);
  if (!status.ok()) return "decoding failed: " + status.message();
  status = SpaceDescription(vector.at("space"), &expected_description, &lossy);
  if (!status.ok()) return status.message();
  gym_remote::Space space, expected;
  status = gym_remote::Space::FromDescription(description, &space);
  if (!status.ok()) return "not a space: " + status.message();
  status = gym_remote::Space::FromDescription(expected_description, &expected);
  if (!status.ok()) return "the expected space: " + status.message();
  const bool other = space.kind() == gym_remote::Space::Kind::kOther;
  if (other ? space.other() != description : space != expected) return "rebuilt " + space.Repr();
  if (vector.value("canonical", false) && description.Find("rng") == nullptr) {
    gym_remote::EncodedValue encoded;
    const Value described = space.Describe();
    status = gym_remote::EncodeValue(described, &encoded);
    if (!status.ok() || encoded.body != Body(vector)) return "described as " + encoded.body.substr(0, 200);
    std::vector<std::string> buffers(encoded.buffers.begin(), encoded.buffers.end());
    if (buffers != Buffers(vector)) return "described with other buffers";
  }
  if (description.Find("rng") != nullptr) return "has a random generator state, which this client ignores";
  return "";
}

std::string CheckMessage(const json& vector) {
  const auto kind = static_cast<gym_remote::MessageKind>(vector.at("kind").get<int>());
  const auto seq = std::stoull(vector.at("seq").get<std::string>());
  const auto count = static_cast<std::uint16_t>(vector.at("count").get<int>());
  const auto flags = static_cast<std::uint16_t>(vector.at("flags").get<int>());
  std::vector<std::string> frames = {gym_remote::PackHeader(kind, seq, count, flags)};
  if (!vector.at("indexes").is_null()) {
    frames.push_back(gym_remote::PackIndexFrame(vector.at("indexes").get<std::vector<std::size_t>>()));
  }
  Value value;
  gym_remote::EncodedValue encoded;
  if (!vector.at("value").is_null()) {
    bool lossy = false;
    Status status = FromDescription(vector.at("value"), &value, &lossy);
    if (status.ok()) status = gym_remote::EncodeValue(value, &encoded);
    if (!status.ok()) return status.message();
    frames.push_back(encoded.body);
    for (std::string_view buffer : encoded.buffers) frames.emplace_back(buffer);
  }
  std::vector<std::string> expected;
  for (const json& hex : vector.at("frames")) expected.push_back(Unhex(hex.get<std::string>()));
  return frames == expected ? "" : "other frames";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s test-vectors.json\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::printf("%s not found: skipped\n", argv[1]);
    return 77;  // ctest's SKIP_RETURN_CODE
  }
  std::stringstream text;
  text << file.rdbuf();
  const json document = json::parse(text.str(), nullptr, false);
  if (document.is_discarded() || document.value("protocol", 0) != 2) {
    std::printf("%s is not a test-vector file of protocol 2\n", argv[1]);
    return 1;
  }
  for (const auto& [section, vectors] : document.items()) {
    if (!vectors.is_array()) continue;  // format, protocol, about
    for (const json& vector : vectors) {
      std::string problem;
      const bool rejected = section.rfind("rejected_", 0) == 0;
      try {
        if (section == "values") problem = CheckValue(vector);
        else if (section == "rejected_values") problem = CheckRejected(vector);
        else if (section == "headers" || section == "rejected_headers") problem = CheckHeader(vector, rejected);
        else if (section == "index_frames" || section == "rejected_index_frames") problem = CheckIndexFrame(vector, rejected);
        else if (section == "result_scalars" || section == "rejected_result_scalars") problem = CheckResultScalars(vector, rejected);
        else if (section == "step_dtypes" || section == "rejected_step_dtypes") problem = CheckStepDtypes(vector, rejected);
        else if (section == "spaces") problem = CheckSpace(vector);
        else if (section == "messages") problem = CheckMessage(vector);
        else problem = "unknown section";
      } catch (const std::exception& error) {
        problem = std::string("malformed vector: ") + error.what();
      }
      Record(vector, section, problem);
    }
  }
  std::printf("%d vectors passed, %d skipped (optional), %d failed\n", g_passed, g_skipped, g_failed);
  return g_failed == 0 ? 0 : 1;
}
