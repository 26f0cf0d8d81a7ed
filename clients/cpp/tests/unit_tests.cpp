// Unit tests of the codec, the protocol frames, the spaces, the key derivation, the hosted envs' step
// semantics and the probe env, without sockets. The expected bodies and buffers were produced by
// gym_remote's Python implementation (gym_remote.codec.encode, gym_remote.probe.ProbeEnv,
// gym_remote.security.keys_from_secret), so these tests pin the C++ client to it byte for byte.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gym_remote/codec.hpp"
#include "gym_remote/protocol.hpp"
#include "gym_remote/security.hpp"
#include "gym_remote/spaces.hpp"
#include "hosted_envs.hpp"
#include "probe_env.hpp"
#include "check.hpp"
#include "text.hpp"

using namespace gym_remote;

namespace {

std::string Show(const std::string& text) { return text; }
std::string Show(const Value& value) { return value.Repr(); }
template <typename T>
std::string Show(const T& value) {
  return std::to_string(value);
}

struct Encoded {
  std::string body;
  std::vector<std::string> buffers;  // hex
};

Encoded Encode(const Value& value) {
  EncodedValue encoded;
  Status status = EncodeValue(value, &encoded);
  CHECK(status.ok());
  Encoded out{encoded.body, {}};
  for (std::string_view buffer : encoded.buffers) out.buffers.push_back(Hex(buffer));
  return out;
}

Status Decode(const std::string& body, const std::vector<std::string>& hex_buffers, Value* out) {
  std::vector<std::string> buffers;
  for (const std::string& hex : hex_buffers) buffers.push_back(Unhex(hex));
  std::vector<std::string_view> views(buffers.begin(), buffers.end());
  return DecodeValue(body, views, out);
}

void CheckEncodes(const Value& value, const std::string& body, const std::vector<std::string>& buffers) {
  const Encoded encoded = Encode(value);
  CHECK_EQ(encoded.body, body);
  CHECK(encoded.buffers == buffers);
  Value decoded;
  CHECK(Decode(body, buffers, &decoded).ok());
  CHECK_EQ(decoded, value);  // and back
}

void CheckRejected(const std::string& body, const std::vector<std::string>& buffers, const std::string& part) {
  Value decoded;
  Status status = Decode(body, buffers, &decoded);
  ++check::checks;
  if (status.ok() || status.message().find(part) == std::string::npos) {
    ++check::failures;
    std::fprintf(stderr, "expected %s to be rejected with '%s', got: %s\n", body.substr(0, 80).c_str(), part.c_str(),
                 status.ok() ? "accepted" : status.message().c_str());
  }
}

// -- tests ------------------------------------------------------------------------------------------

void TestFloatFormat() {
  const std::vector<std::pair<double, const char*>> cases = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e+16, "1e+16"},
      {1000000000000000.0, "1000000000000000.0"},
      {1e-05, "1e-05"},
      {0.0001, "0.0001"},
      {-0.0, "-0.0"},
      {5e-324, "5e-324"},
      {1.5e+300, "1.5e+300"},
      {123456789.123, "123456789.123"},
      {2.5, "2.5"},
      {0.10000000149011612, "0.10000000149011612"},
      {1.0 / 3.0, "0.3333333333333333"},
      {1.152921504606847e+18, "1.152921504606847e+18"},
      {-1e-07, "-1e-07"},
      {1e+22, "1e+22"},
      {5e-05, "5e-05"},
      {9007199254740992.0, "9007199254740992.0"},
      {0.0, "0.0"},
      {100.0, "100.0"},
  };
  for (const auto& [number, text] : cases) CHECK_EQ(FormatFloat(number), std::string(text));
  CHECK_EQ(Encode(Value::Float(1.0)).body, std::string("1.0"));  // a whole float stays a float
  CHECK_EQ(Encode(Value::Int(1)).body, std::string("1"));
}

void TestEncodings() {
  Value big;
  CHECK(Value::BigIntFromHex("400000000000000000", &big).ok());
  Value top;
  CHECK(Value::BigIntFromHex("8000000000000000", &top).ok());  // 2**63: beyond int64
  CHECK(top.kind() == Value::Kind::kBigInt);
  Value dict = Value::Dict();
  dict.Set("a", Value::Int(1));
  dict.Set("b", Value::List({Value::Float(1.0), Value::String("x"), Value(), Value::Bool(true)}));
  dict.Set("c", Value::Tuple({big, Value::Int(std::numeric_limits<std::int64_t>::min()), top}));
  dict.Set("\xc3\xa9", Value::Float(-std::numeric_limits<double>::infinity()));
  CheckEncodes(dict,
               "{\"a\":1,\"b\":[\"l\",1.0,\"x\",null,true],\"c\":[\"t\",[\"i\",\"400000000000000000\"],"
               "-9223372036854775808,[\"i\",\"8000000000000000\"]],\"\\u00e9\":[\"f\",\"-inf\"]}",
               {});

  const Value pairs = Value::PairDict({{Value::Int(1), Value::String("one")},
                                       {Value::Tuple({Value::Int(2), Value::String("t")}), Value::Bytes(std::string("\0\xff", 2))}});
  CheckEncodes(pairs, "[\"d\",1,\"one\",[\"t\",2,\"t\"],[\"b\",0]]", {"00ff"});

  const Value scalars = Value::List({Value::ScalarFloat(DType::kFloat32, 0.1), Value::ScalarUInt(DType::kUInt64, ~0ull),
                                     Value::ScalarBool(false), Value::ScalarInt(DType::kInt8, -5),
                                     Value::ScalarFloat(DType::kFloat64, std::nan("")),
                                     Value::ScalarFloat(DType::kFloat32, std::numeric_limits<double>::infinity())});
  CheckEncodes(scalars,
               "[\"l\",[\"s\",\"<f4\",0.10000000149011612],[\"s\",\"<u8\",18446744073709551615],[\"s\",\"|b1\",false],"
               "[\"s\",\"|i1\",-5],[\"s\",\"<f8\",\"nan\"],[\"s\",\"<f4\",\"inf\"]]",
               {});

  CheckEncodes(Value::ArrayOf(DType::kUInt16, {2, 3}, std::vector<int>{0, 1, 2, 3, 4, 5}), "[\"a\",\"<u2\",[2,3],0]",
               {"000001000200030004000500"});
  CheckEncodes(Value::String("tab\t quote\" back\\ nl\n ctrl\x01 del\x7f \xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"),
               "\"tab\\t quote\\\" back\\\\ nl\\n ctrl\\u0001 del\\u007f \\u00e9 \\u20ac \\ud83d\\ude42\"", {});
  // an empty array, a graph, an object array
  CheckEncodes(Value::ArrayOf(DType::kFloat32, {0, 3}, std::vector<float>{}), "[\"a\",\"<f4\",[0,3],0]", {""});
  CheckEncodes(Value::Graph(Value::ArrayOf(DType::kInt8, {1}, std::vector<int>{7}), Value(), Value()),
               "[\"g\",[\"a\",\"|i1\",[1],0],null,null]", {"07"});
  Value objects;
  CHECK(Value::ObjectArray({2}, {Value::Int(1), Value::String("a")}, &objects).ok());
  CheckEncodes(objects, "[\"o\",[2],[1,\"a\"]]", {});

  // nesting: a container at level 63 travels, one at level 64 does not (PROTOCOL.md §3.1)
  Value deep = Value::Int(1);
  for (int i = 0; i < 64; ++i) deep = Value::List({deep});
  EncodedValue encoded;
  CHECK(EncodeValue(deep, &encoded).ok());
  deep = Value::List({deep});
  Status status = EncodeValue(deep, &encoded, "infos of slot 3");
  CHECK(!status.ok() && status.code() == StatusCode::kEncodeError);
  CHECK(status.message().find("cannot send infos of slot 3[0][0]") == 0);
  Value bad_utf8 = Value::Dict({{"k", Value::List({Value::String("\xff")})}});
  status = EncodeValue(bad_utf8, &encoded, "info");
  CHECK(!status.ok() && status.message().find("cannot send info['k'][0]") == 0);
}

void TestDecoding() {
  Value value;
  // integers: beyond int64 as a bare literal (Python's json reads any int), and in tag "i"
  CHECK(Decode("18446744073709551617", {}, &value).ok());
  CHECK(value.kind() == Value::Kind::kBigInt && value.text() == "10000000000000001");
  CHECK(Decode("-100000000000000000000000000000", {}, &value).ok());
  CHECK(value.kind() == Value::Kind::kBigInt && value.text() == "-1431e0fae6d7217caa0000000");
  CHECK(Decode("9223372036854775807", {}, &value).ok() && value == Value::Int(std::numeric_limits<std::int64_t>::max()));
  CHECK(Decode("[\"i\",\"-8000000000000000\"]", {}, &value).ok() &&
        value == Value::Int(std::numeric_limits<std::int64_t>::min()));
  CHECK(Decode("[\"i\",\"00ff\"]", {}, &value).ok() && value == Value::Int(255));
  CHECK(Decode("[\"s\",\"<u8\",18446744073709551615]", {}, &value).ok() &&
        value == Value::ScalarUInt(DType::kUInt64, ~0ull));
  CHECK(Decode("[\"s\",\"float32\",0.1]", {}, &value).ok() && value == Value::ScalarFloat(DType::kFloat32, 0.1));
  CHECK(Decode("[\"s\",\"<f8\",3]", {}, &value).ok() && value == Value::ScalarFloat(DType::kFloat64, 3.0));
  CHECK(Decode("[\"S\",\"<i4\",0]", {"05000000"}, &value).ok() && value == Value::ScalarInt(DType::kInt32, 5));
  CHECK(Decode("1.0", {}, &value).ok() && value.kind() == Value::Kind::kFloat);
  CHECK(Decode("1", {}, &value).ok() && value.kind() == Value::Kind::kInt);
  CHECK(Decode("1e2", {}, &value).ok() && value == Value::Float(100.0));
  CHECK(Decode("{\"a\":1,\"a\":2}", {}, &value).ok() && value.entries().size() == 1 && *value.Find("a") == Value::Int(2));
  CHECK(Decode("[\"d\",\"a\",1]", {}, &value).ok() && value.kind() == Value::Kind::kDict);  // str keys: a plain dict
  CHECK(Decode("[\"a\",\"=u2\",[3],0]", {"010002000300"}, &value).ok() && value.dtype() == DType::kUInt16);
  Value deep_ok;
  std::string body = "1";
  for (int i = 0; i < 64; ++i) body = "[\"l\"," + body + "]";
  CHECK(Decode(body, {}, &deep_ok).ok());

  CheckRejected("[1,2]", {}, "untagged JSON array");
  CheckRejected("[]", {}, "untagged JSON array");
  CheckRejected("NaN", {}, "not JSON");
  CheckRejected("[\"l\",Infinity]", {}, "not JSON");
  CheckRejected("1e400", {}, "not JSON");
  CheckRejected("[\"l\"," + body + "]", {}, "nested deeper than 64 levels");
  CheckRejected("{\"a\":" + body + "}", {}, "nested deeper than 64 levels");
  std::string very_deep(100000, '[');
  CheckRejected(very_deep, {}, "nested deeper than 64 levels");
  CheckRejected("[\"z\",1]", {}, "unknown tag 'z'");
  CheckRejected("[\"a\",\"<f4\",[2],0]", {"0000"}, "needs 8 bytes, its buffer has 2");
  CheckRejected("[\"a\",\"<f4\",[2],1]", {"00000000"}, "buffer index 1");
  CheckRejected("[\"a\",\"<f4\",[-1],0]", {""}, "bad array shape");
  CheckRejected("[\"a\",\"<f4\",[true],0]", {""}, "bad array shape");
  CheckRejected("[\"a\",\"<f4\",[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],0]", {"00000000"},
                "bad array shape");
  CheckRejected("[\"a\",\"<c8\",[1],0]", {"0000000000000000"}, "not supported by this client");
  CheckRejected("[\"a\",\">f4\",[1],0]", {"00000000"}, "big-endian");
  CheckRejected("[\"a\",\"|O\",[1],0]", {"0000000000000000"}, "not supported");
  CheckRejected("[\"a\",\"<f4\",[1]]", {}, "tag 'a' takes 3 fields, got 2");
  CheckRejected("[\"p\",0]", {"80"}, "pickle is not allowed");
  CheckRejected("[\"f\",\"NaN\"]", {}, "'f' tag expects");
  CheckRejected("[\"i\",\"FF\"]", {}, "lowercase hex");
  CheckRejected("[\"i\",\"\"]", {}, "lowercase hex");
  CheckRejected("[\"s\",\"|u1\",256]", {}, "does not fit in uint8");
  CheckRejected("[\"s\",\"<i8\",true]", {}, "does not suit dtype int64");
  CheckRejected("[\"s\",\"|b1\",1]", {}, "does not suit dtype bool");
  CheckRejected("[\"s\",\"<i4\",1.0]", {}, "does not suit dtype int32");
  CheckRejected("[\"d\",1]", {}, "key/value pairs");
  CheckRejected("[\"d\",[\"l\"],1]", {}, "not hashable");
  CheckRejected("[\"b\",\"0\"]", {"00"}, "buffer index");
  CheckRejected("\xEF\xBB\xBF" "1", {}, "byte order mark");
  CheckRejected("\"\xff\"", {}, "not valid UTF-8");
  CheckRejected("{\"a\":1", {}, "not JSON");
  CheckRejected("1 2", {}, "not JSON");
}

void TestProtocolFrames() {
  const std::string header = PackHeader(MessageKind::kStep, 0x0102030405060708ull, 513, kFlagSubset | kFlagValue);
  CHECK_EQ(Hex(header), std::string("4752020b050001020807060504030201"));
  Header parsed;
  CHECK(ParseHeader(header, &parsed).ok());
  CHECK(parsed.kind == 11 && parsed.count == 513 && parsed.flags == 5 && parsed.seq == 0x0102030405060708ull);
  CHECK(!ParseHeader(header.substr(0, 15), &parsed).ok());
  std::string unknown = header;
  unknown[3] = 99;
  CHECK(!ParseHeader(unknown, &parsed).ok());
  unknown[2] = 3;  // another version: its kinds are not judged
  CHECK(ParseHeader(unknown, &parsed).ok() && parsed.version == 3);

  std::vector<std::size_t> indexes;
  CHECK(ParseIndexFrame(PackIndexFrame({2, 0}), 2, 3, &indexes).ok() && indexes == std::vector<std::size_t>({2, 0}));
  CHECK(!ParseIndexFrame(PackIndexFrame({1, 1}), 2, 3, &indexes).ok());
  CHECK(!ParseIndexFrame(PackIndexFrame({3}), 1, 3, &indexes).ok());
  CHECK(!ParseIndexFrame("", 0, 3, &indexes).ok());
  CHECK(!ParseIndexFrame(PackIndexFrame({1, 2}), 1, 3, &indexes).ok());

  std::vector<DType> dtypes;
  CHECK(ParseStepDtypes(PackHeader(MessageKind::kStep, 1, 2, kFlagDtypes) + "[\"<f8\", \"|i1\"]", 2, &dtypes).ok());
  CHECK(dtypes == std::vector<DType>({DType::kFloat64, DType::kInt8}));
  CHECK(!ParseStepDtypes(PackHeader(MessageKind::kStep) + "[\"<f8\"]", 2, &dtypes).ok());
  CHECK(!ParseStepDtypes(PackHeader(MessageKind::kStep) + "nope", 1, &dtypes).ok());

  const std::string result = PackResultFrame(9, kFlagValue, {1.5, -2.0}, {true, false}, {false, true});
  CHECK_EQ(result.size(), std::size_t{16 + 20});
  CHECK_EQ(Hex(result.substr(16)), std::string("000000000000f83f00000000000000c0") + "0100" + "0001");
}

void TestSpaces() {
  // The probe's descriptions, as gym_remote.codec.space_to_value writes them (CONFORMANCE.md §1.1).
  const Encoded observation = Encode(probe::ProbeEnv::ObservationSpace().Describe());
  CHECK_EQ(observation.body,
           std::string("{\"space\":\"Dict\",\"spaces\":[\"l\",[\"l\",\"zeta\",{\"space\":\"Box\",\"low\":[\"a\",\"<f4\",[2],0],"
                       "\"high\":[\"a\",\"<f4\",[2],1],\"dtype\":\"<f4\"}],[\"l\",\"alpha\",{\"space\":\"Discrete\",\"n\":16,"
                       "\"start\":-3,\"dtype\":\"<i8\"}],[\"l\",\"mid\",{\"space\":\"Tuple\",\"spaces\":[\"l\",{\"space\":"
                       "\"MultiDiscrete\",\"nvec\":[\"a\",\"<i8\",[2],2],\"start\":[\"a\",\"<i8\",[2],3],\"dtype\":\"<i8\"},"
                       "{\"space\":\"MultiBinary\",\"n\":3}]}]]}"));
  CHECK(observation.buffers == std::vector<std::string>({"000080ff000080ff", "0000807f0000807f",
                                                         "04000000000000000600000000000000",
                                                         "00000000000000000000000000000000"}));
  const Encoded action = Encode(probe::ProbeEnv::ActionSpace().Describe());
  CHECK_EQ(action.body, std::string("{\"space\":\"Tuple\",\"spaces\":[\"l\",{\"space\":\"Discrete\",\"n\":3,\"start\":-1,"
                                    "\"dtype\":\"<i8\"},{\"space\":\"Box\",\"low\":[\"a\",\"<f4\",[2],0],\"high\":[\"a\","
                                    "\"<f4\",[2],1],\"dtype\":\"<f4\"},{\"space\":\"MultiBinary\",\"n\":2}]}"));
  CHECK(action.buffers == std::vector<std::string>({"000080bf000080bf", "0000803f0000803f"}));

  const std::vector<Leaf> leaves = probe::ProbeEnv::ObservationSpace().Leaves();
  CHECK_EQ(leaves.size(), std::size_t{4});
  CHECK(leaves[0].dtype == DType::kFloat32 && leaves[0].shape == Shape({2}));
  CHECK(leaves[1].dtype == DType::kInt64 && leaves[1].shape.empty());
  CHECK(leaves[2].dtype == DType::kInt64 && leaves[2].shape == Shape({2}));
  CHECK(leaves[3].dtype == DType::kInt8 && leaves[3].shape == Shape({3}));

  Space parsed;
  CHECK(Space::FromDescription(probe::ProbeEnv::ObservationSpace().Describe(), &parsed).ok());
  CHECK(parsed == probe::ProbeEnv::ObservationSpace());
  Value text = Value::Dict({{"space", Value::String("Text")}, {"min_length", Value::Int(1)},
                            {"max_length", Value::Int(4)}, {"charset", Value::String("ab")}});
  CHECK(Space::FromDescription(text, &parsed).ok() && !parsed.HasArrayLayout());
  Value with_text = Value::Dict({{"space", Value::String("Tuple")},
                                 {"spaces", Value::List({probe::ProbeEnv::ActionSpace().Describe(), text})}});
  CHECK(Space::FromDescription(with_text, &parsed).ok() && !parsed.HasArrayLayout() && parsed.Leaves().empty());
  CHECK(!Space::FromDescription(Value::Dict({{"space", Value::String("pickle")}}), &parsed).ok());
  CHECK(!Space::FromDescription(Value::Dict({{"space", Value::String("Discrete")}, {"n", Value::Float(2)}}), &parsed).ok());
  // CartPole-v1's observation space: Box(-high, high, float32), high = [4.8, inf, 0.41887903, inf]
  const double inf = std::numeric_limits<double>::infinity();
  const double theta = 12 * 2 * M_PI / 360;
  const Encoded cartpole = Encode(Space::Box({-2.4 * 2, -inf, -theta * 2, -inf}, {2.4 * 2, inf, theta * 2, inf}).Describe());
  CHECK(cartpole.buffers == std::vector<std::string>({"9a9999c0000080ff5077d6be000080ff", "9a9999400000807f5077d63e0000807f"}));
}

void TestSecretKeys() {
  KeyPair server, clients;
  CHECK(KeysFromSecret("unit-test secret, 32 characters!", &server, &clients).ok());
  CHECK_EQ(server.public_key, std::string("YWG/Z*Q6+ST^^Ou*Z^Y{O1aWl{iI/2&J]Qhg{>}D"));
  CHECK_EQ(server.secret_key, std::string("<@W?gUNM#goO)Z7:TMxX@4&oM?(TVW{.gB{mR9x*"));
  CHECK_EQ(clients.public_key, std::string("t&qNZaJqCY4hU6}Ac)7Wshg/M{b2MhKp@+Ew&>0O"));
  CHECK_EQ(clients.secret_key, std::string("@l1@h^J2w7opK(ClJz+>p)ToO(ka$4d8s2T24X$u"));
  CHECK(!KeysFromSecret("", &server, &clients).ok());
}

// PROTOCOL.md §12.2: one leading byte-order mark and the ASCII whitespace at both ends are dropped, nothing else.
void TestSecretFiles() {
  const std::string path = "/tmp/gym_remote_unit_test_secret_" + std::to_string(getpid());
  auto read = [&path](const std::string& content, std::string* secret) {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    std::fwrite(content.data(), 1, content.size(), file);
    std::fclose(file);
    chmod(path.c_str(), 0600);
    return ReadSecretFile(path, secret);
  };
  std::string secret;
  CHECK(read("\xEF\xBB\xBF  the secret\r\n", &secret).ok());
  CHECK_EQ(secret, std::string("the secret"));
  CHECK(read("the secret\xC2\xA0\n", &secret).ok());  // U+00A0 is no ASCII whitespace: kept
  CHECK_EQ(secret, std::string("the secret\xC2\xA0"));
  CHECK(read("\xEF\xBB\xBF\xEF\xBB\xBFthe secret", &secret).ok());  // one mark only
  CHECK_EQ(secret, std::string("\xEF\xBB\xBFthe secret"));
  CHECK(!read("\xEF\xBB\xBF \n", &secret).ok());
  std::remove(path.c_str());
}

struct ProbeStep {
  std::string obs_body;
  std::vector<std::string> obs_buffers;
  std::string info_body;
  std::vector<std::string> info_buffers;
  double reward;
  bool terminated, truncated;
};

void TestProbe() {
  // ProbeEnv().reset(seed=7, options={"offset": 5}), then five steps, in Python.
  const std::string zeta = "{\"zeta\":[\"a\",\"<f4\",[2],0],\"alpha\":[\"s\",\"<i8\",";
  const std::string mid = "],\"mid\":[\"t\",[\"a\",\"<i8\",[2],1],[\"a\",\"|i1\",[3],2]]}";
  auto info = [](int t, int level, const char* quarter, bool odd) {
    const std::string ts = std::to_string(t);
    std::string half = FormatFloat(t / 2.0);
    std::string body = "{\"t\":" + ts + ",\"half\":" + half + ",\"even\":" + (t % 2 ? "false" : "true") +
                       ",\"level\":[\"s\",\"<i4\"," + std::to_string(level) + "],\"quarter\":[\"s\",\"<f4\"," + quarter +
                       "],\"vec\":[\"a\",\"<i2\",[2],0],\"pair\":[\"t\"," + ts + ",\"x\"],\"items\":[\"l\",[\"i\","
                       "\"1000000000000000" + ts + "\"],null,1.5],\"none\":null,\"nan\":[\"f\",\"nan\"],\"blob\":[\"b\",1],"
                       "\"name\":\"prob\\u00e9\"";
    if (odd) body += ",\"odd\":{\"t\":" + ts + ",\"inf\":[\"f\",\"inf\"]}";
    return body + "}";
  };
  const std::vector<ProbeStep> expected = {
      {zeta + "10" + mid, {"000048400000e0bf", "01000000000000000100000000000000", "010001"}, info(1, 6, "0.25", true),
       {"0100ffff", "0100ff"}, 6.25, false, false},
      {zeta + "11" + mid, {"000068400000a0bf", "02000000000000000200000000000000", "000100"}, info(2, 5, "0.5", false),
       {"0200feff", "0200ff"}, 5.5, false, false},
      {zeta + "12" + mid, {"00005040000098bf", "03000000000000000300000000000000", "010101"}, info(3, 5, "0.75", true),
       {"0300fdff", "0300ff"}, 5.75, false, false},
      {zeta + "-3" + mid, {"00006040000070bf", "00000000000000000400000000000000", "000000"}, info(4, 6, "1.0", false),
       {"0400fcff", "0400ff"}, 6.0, true, false},
      {zeta + "-2" + mid, {"00004040000070bf", "01000000000000000500000000000000", "010001"}, info(5, 7, "1.25", true),
       {"0500fbff", "0500ff"}, 7.25, false, true},
  };
  struct Action {
    int direction;
    double push[2];
    int pressed[2];
  };
  const Action actions[] = {{1, {0.25, -0.5}, {1, 0}}, {-1, {1.0, 1.0}, {0, 1}}, {0, {-0.75, 0.125}, {1, 1}},
                            {1, {0.5, 0.5}, {0, 0}},   {1, {-1.0, 0.0}, {1, 0}}};
  probe::ProbeEnv env;
  Value obs, reset_info;
  const Value options = Value::Dict({{"offset", Value::Int(5)}});
  CHECK(env.reset(7, &options, &obs, &reset_info).ok());
  const Encoded first = Encode(obs);
  CHECK_EQ(first.body, zeta + "9" + mid);
  CHECK(first.buffers == std::vector<std::string>({"000040400000c0bf", "00000000000000000000000000000000", "000000"}));
  CHECK_EQ(Encode(reset_info).body, std::string("{\"base\":12,\"seeded\":true,\"offset\":5}"));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const Action& a = actions[i];
    const Value action = Value::Tuple({Value::ScalarInt(DType::kInt64, a.direction),
                                       Value::ArrayOf(DType::kFloat32, {2}, std::vector<double>{a.push[0], a.push[1]}),
                                       Value::ArrayOf(DType::kInt8, {2}, std::vector<int>{a.pressed[0], a.pressed[1]})});
    StepResult result;
    CHECK(env.step(action, &result).ok());
    const Encoded o = Encode(result.observation), n = Encode(result.info);
    CHECK_EQ(o.body, expected[i].obs_body);
    CHECK(o.buffers == expected[i].obs_buffers);
    CHECK_EQ(n.body, expected[i].info_body);
    CHECK(n.buffers == expected[i].info_buffers);
    CHECK_EQ(result.reward, expected[i].reward);
    CHECK(result.terminated == expected[i].terminated && result.truncated == expected[i].truncated);
  }
  // the actions may also arrive as plain values (FLAG_VALUE) or in other dtypes (FLAG_DTYPES)
  probe::ProbeEnv other;
  CHECK(other.reset(7, &options, &obs, &reset_info).ok());
  StepResult result;
  CHECK(other.step(Value::Tuple({Value::Int(1), Value::List({Value::Float(0.25), Value::Float(-0.5)}),
                                 Value::List({Value::Int(1), Value::Int(0)})}),
                   &result)
            .ok());
  const Encoded from_values = Encode(result.observation);
  CHECK_EQ(from_values.buffers[0], std::string("000048400000e0bf"));
  // options errors, as the Python probe raises them
  const Value bad = Value::Dict({{"offset", Value::Float(1.0)}});
  Status status = other.reset(std::nullopt, &bad, &obs, &reset_info);
  CHECK(!status.ok() && status.type() == "ValueError" &&
        status.message() == "options['offset'] must be an int in [0, 1000), not 1.0");
  const Value truthy = Value::Dict({{"offset", Value::Bool(true)}});
  CHECK(!other.reset(std::nullopt, &truthy, &obs, &reset_info).ok());
}

// HostedEnvs' autoreset semantics (PROTOCOL.md §5.4) with two probes.
void TestHostedEnvs() {
  auto run = [](AutoresetMode mode, std::function<void(HostedEnvs&, std::vector<Value>&, std::vector<Value>&)> body) {
    probe::ProbeEnv a, b;
    HostedEnvs hosted({&a, &b});
    hosted.Configure(probe::ProbeEnv::ObservationSpace(), probe::ProbeEnv::ActionSpace(), mode, false);
    std::vector<Value> infos, finals;
    body(hosted, infos, finals);
  };
  const Value zero_action = Value::Tuple({Value::ScalarInt(DType::kInt64, 0),
                                          Value::ArrayOf(DType::kFloat32, {2}, std::vector<float>{0, 0}),
                                          Value::ArrayOf(DType::kInt8, {2}, std::vector<int>{0, 0})});
  const std::vector<Value> actions = {zero_action, zero_action};
  CommandError error;
  // seed 0: term_step 2; seed 3: term_step 5
  run(AutoresetMode::kSameStep, [&](HostedEnvs& hosted, std::vector<Value>& infos, std::vector<Value>& finals) {
    CHECK(hosted.Reset(hosted.all(), {Value::Int(0), Value::Int(3)}, nullptr, &infos, &error));
    CHECK(hosted.Step(hosted.all(), actions, &infos, &finals, &error) && finals.empty());
    CHECK(hosted.Step(hosted.all(), actions, &infos, &finals, &error) && finals.size() == 2);
    CHECK(finals[0].kind() == Value::Kind::kTuple && finals[1].is_none());
    CHECK(infos[0].Find("base") != nullptr);   // env 0's info is the reset's
    CHECK(infos[1].Find("t") != nullptr);      // env 1 goes on
  });
  run(AutoresetMode::kNextStep, [&](HostedEnvs& hosted, std::vector<Value>& infos, std::vector<Value>& finals) {
    CHECK(hosted.Reset(hosted.all(), {Value::Int(0), Value::Int(3)}, nullptr, &infos, &error));
    CHECK(hosted.Step(hosted.all(), actions, &infos, &finals, &error));
    CHECK(hosted.Step(hosted.all(), actions, &infos, &finals, &error) && finals.empty());  // env 0 terminates
    CHECK(hosted.Step({0}, {zero_action}, &infos, &finals, &error));                      // the autoreset step
    CHECK(infos.size() == 1 && infos[0].Find("base") != nullptr);
    std::vector<std::string> frames;
    hosted.ResultFrames(5, 0, {0}, &frames);
    CHECK(frames.size() == 5 && frames[0].size() == 26);
    CHECK(frames[0].substr(16, 8) == std::string(8, '\0'));  // reward 0 on the autoreset step
  });
  run(AutoresetMode::kDisabled, [&](HostedEnvs& hosted, std::vector<Value>& infos, std::vector<Value>& finals) {
    CHECK(hosted.Reset(hosted.all(), {Value::Int(0), Value::None()}, nullptr, &infos, &error));
    for (int i = 0; i < 3; ++i) CHECK(hosted.Step(hosted.all(), actions, &infos, &finals, &error));
    CHECK(*infos[0].Find("t") == Value::Int(3));  // no autoreset: env 0 steps past its end
    std::vector<Value> results;
    CHECK(hosted.Call({1, 0}, "np_random_seed", "", &results, &error));
    CHECK(results == std::vector<Value>({Value::Int(-1), Value::Int(0)}));
    CHECK(!hosted.Call({0}, "nope", "", &results, &error) && error.status.type() == "AttributeError");
    CHECK(error.status.message() == "'ProbeEnv' object has no attribute 'nope'" && error.index == 0);
    CHECK(hosted.SetAttr({1}, "nope", {Value::Float(0.5)}, &error));
    CHECK(hosted.Call({0, 1}, "nope", "has_attr", &results, &error));
    CHECK(results == std::vector<Value>({Value::Bool(false), Value::Bool(true)}));
    CHECK(hosted.Call({1}, "nope", "", &results, &error) && results[0] == Value::Float(0.5));
    CHECK(hosted.Call({0}, "gym_remote:wrappers", "", &results, &error) && results[0] == Value::List());
    CHECK(!hosted.Reset({0}, {Value::Int(-1)}, nullptr, &infos, &error) && error.status.module() == "gymnasium.error");
  });
}

}  // namespace

int main() {
  TestFloatFormat();
  TestEncodings();
  TestDecoding();
  TestProtocolFrames();
  TestSpaces();
  TestSecretKeys();
  TestSecretFiles();
  TestProbe();
  TestHostedEnvs();
  return check::CheckSummary();
}
