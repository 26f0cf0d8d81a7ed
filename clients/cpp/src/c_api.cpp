// The C interface (include/gym_remote/gym_remote.h) over the C++ client: handles wrap the C++ objects,
// every entry point catches whatever C++ throws and turns it into a status and gr_last_error().
#include "gym_remote/gym_remote.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gym_remote/client.hpp"
#include "gym_remote/log.hpp"
#include "gym_remote/protocol.hpp"
#include "gym_remote/security.hpp"
#include "gym_remote/spaces.hpp"
#include "gym_remote/value.hpp"
#include "text.hpp"

using gym_remote::DType;
using gym_remote::Space;
using gym_remote::Status;
using gym_remote::StatusCode;
using gym_remote::Value;

// The handles are the C++ objects themselves (a gr_value* is a Value*), so that borrowed items of a
// container need no wrapper of their own.
struct gr_value : Value {
  using Value::Value;
  gr_value(Value value) : Value(std::move(value)) {}  // NOLINT: implicit on purpose
};
struct gr_space {
  Space space;
  Space::Children children;  // a Dict or Tuple being built
  bool dict = false;
};
struct gr_options {
  gym_remote::ClientOptions options;
};
struct gr_error {
  Status status;
};
struct gr_step_result {
  gym_remote::StepResult result;
};

// The numbers of gym_remote.h are the C++ enums' (cast directly); these keep them so.
static_assert(GR_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument) &&
                  GR_ENV_ERROR == static_cast<int>(StatusCode::kEnvError) &&
                  GR_TIMEOUT == static_cast<int>(StatusCode::kTimeout) &&
                  GR_INTERNAL == static_cast<int>(StatusCode::kInternal) &&
                  GR_PENDING == static_cast<int>(StatusCode::kPending),
              "gr_status and StatusCode differ");
static_assert(GR_STATE_NEW == static_cast<int>(gym_remote::ClientState::kNew) &&
                  GR_STATE_MEMBER == static_cast<int>(gym_remote::ClientState::kMember) &&
                  GR_STATE_FAILED == static_cast<int>(gym_remote::ClientState::kFailed),
              "gr_state and ClientState differ");
static_assert(GR_NONE == static_cast<int>(Value::Kind::kNull) && GR_BIG_INT == static_cast<int>(Value::Kind::kBigInt) &&
                  GR_PAIR_DICT == static_cast<int>(Value::Kind::kPairDict) &&
                  GR_GRAPH == static_cast<int>(Value::Kind::kGraph),
              "gr_kind and Value::Kind differ");

namespace {

thread_local std::string g_last_error, g_last_type, g_last_module;

gr_status Fail(gr_status code, const std::string& message) {
  g_last_error = message;
  g_last_type.clear();
  g_last_module.clear();
  return code;
}

gr_status FromStatus(const Status& status) {
  if (status.ok()) return GR_OK;
  Fail(static_cast<gr_status>(status.code()), status.message());
  g_last_type = status.type();
  g_last_module = status.module();
  return static_cast<gr_status>(status.code());
}

// Runs `body`, turning anything thrown into GR_INTERNAL.
template <typename Body>
gr_status Guard(const char* where, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(GR_INTERNAL, std::string(where) + ": out of memory");
  } catch (const std::exception& error) {
    return Fail(GR_INTERNAL, std::string(where) + ": internal error: " + error.what());
  } catch (...) {
    return Fail(GR_INTERNAL, std::string(where) + ": internal error");
  }
}

// The same for functions that return a handle (NULL on failure).
template <typename T, typename Body>
T* GuardHandle(const char* where, Body body) {
  T* out = nullptr;
  Guard(where, [&]() -> gr_status {
    out = body();
    return GR_OK;
  });
  return out;
}

gr_value* New(Value value) { return new gr_value(std::move(value)); }

bool Dtype(const char* where, const char* text, DType* dtype) {
  std::string why;
  if (text == nullptr) {
    Fail(GR_INVALID_ARGUMENT, std::string(where) + ": the dtype is NULL");
    return false;
  }
  if (!gym_remote::ParseDType(text, dtype, &why)) {
    Fail(GR_INVALID_ARGUMENT, std::string(where) + ": unsupported dtype '" + text + "'" + (why.empty() ? "" : ": " + why));
    return false;
  }
  return true;
}

bool Null(const char* where, const void* handle, const char* what) {
  if (handle != nullptr) return false;
  Fail(GR_INVALID_ARGUMENT, std::string(where) + ": " + what + " is NULL");
  return true;
}

gr_status WrongKind(const char* where, const Value& value, const char* expected) {
  return Fail(GR_INVALID_ARGUMENT, std::string(where) + ": expected " + expected + ", got a " + value.TypeName());
}

gym_remote::Shape ShapeOf(const int64_t* shape, size_t ndim) {
  return ndim == 0 ? gym_remote::Shape() : gym_remote::Shape(shape, shape + ndim);
}

// -- the env adapter: a gym_remote::Env whose methods are the host's callbacks ----------------------

struct Shared {
  gr_env_callbacks callbacks{};
  void* user = nullptr;
  Space observation_space, action_space;
  std::string class_name = "Env";
  Value metadata = Value::Dict();
  std::optional<std::string> render_mode;
};

Status Failed(gr_status code, const gr_error& error, const char* what) {
  if (!error.status.ok()) return error.status;
  if (code == GR_ENV_ERROR) return gym_remote::Status::EnvError("RuntimeError", std::string(what) + " failed");
  return gym_remote::Status::EnvError("RuntimeError",
                                      std::string(what) + " returned status " + std::to_string(code) +
                                          " without an error");
}

class CEnv : public gym_remote::Env {
 public:
  CEnv(const Shared* shared, size_t index) : shared_(shared), index_(index) {}

  const Space& observation_space() const override { return shared_->observation_space; }
  const Space& action_space() const override { return shared_->action_space; }

  Status reset(const std::optional<std::int64_t>& seed, const Value* options, Value* observation,
               Value* info) override {
    return reset_any_seed(seed ? Value::Int(*seed) : Value(), options, observation, info);
  }

  Status reset_any_seed(const Value& seed, const Value* options, Value* observation, Value* info) override {
    if (shared_->callbacks.reset == nullptr) return gym_remote::Status::EnvError("NotImplementedError", "no reset callback");
    int32_t has_seed = 0;
    uint64_t number = 0;
    if (seed.kind() == Value::Kind::kInt) {
      has_seed = 1;
      number = static_cast<uint64_t>(seed.as_int());
    } else if (seed.kind() == Value::Kind::kBigInt) {
      const std::string& hex = seed.text();
      has_seed = hex.size() <= 16 ? 1 : 2;
      if (has_seed == 1) number = std::strtoull(hex.c_str(), nullptr, 16);
    }
    gr_value seed_value(seed), obs, out_info(Value::Dict());
    gr_error error;
    const gr_status code = shared_->callbacks.reset(shared_->user, index_, has_seed, number, &seed_value,
                                                    static_cast<const gr_value*>(options), &obs, &out_info, &error);
    if (code != GR_OK) return Failed(code, error, "reset()");
    *observation = std::move(static_cast<Value&>(obs));
    *info = std::move(static_cast<Value&>(out_info));
    return Status::Ok();
  }

  Status step(const Value& action, gym_remote::StepResult* result) override {
    if (shared_->callbacks.step == nullptr) return gym_remote::Status::EnvError("NotImplementedError", "no step callback");
    gr_step_result out;
    gr_error error;
    const gr_status code =
        shared_->callbacks.step(shared_->user, index_, static_cast<const gr_value*>(&action), &out, &error);
    if (code == GR_PENDING) return Status::Pending();
    if (code != GR_OK) return Failed(code, error, "step()");
    *result = std::move(out.result);
    return Status::Ok();
  }

  Status render(Value* frame) override {
    if (shared_->callbacks.render == nullptr) return Env::render(frame);
    gr_value out;
    gr_error error;
    const gr_status code = shared_->callbacks.render(shared_->user, index_, &out, &error);
    if (code != GR_OK) return Failed(code, error, "render()");
    *frame = std::move(static_cast<Value&>(out));
    return Status::Ok();
  }

  Value metadata() const override { return shared_->metadata; }
  std::optional<std::string> render_mode() const override { return shared_->render_mode; }

  bool get_attr(const std::string& name, Value* value) override {
    if (shared_->callbacks.get_attr == nullptr) return false;
    gr_value out;
    if (shared_->callbacks.get_attr(shared_->user, index_, name.c_str(), &out) == 0) return false;
    *value = std::move(static_cast<Value&>(out));
    return true;
  }

  bool set_attr(const std::string& name, const Value& value) override {
    if (shared_->callbacks.set_attr == nullptr) return false;
    return shared_->callbacks.set_attr(shared_->user, index_, name.c_str(), static_cast<const gr_value*>(&value)) != 0;
  }

  std::string class_name() const override { return shared_->class_name; }

  void close() override {
    if (shared_->callbacks.close != nullptr) shared_->callbacks.close(shared_->user, index_);
  }

 private:
  const Shared* shared_;
  size_t index_;
};

}  // namespace

struct gr_client {
  Shared shared;
  std::vector<std::unique_ptr<CEnv>> envs;
  std::unique_ptr<gym_remote::Client> client;
  std::string error;  // gr_client_error's text
};

extern "C" {

// -- version, errors, logs ---------------------------------------------------------------------------

uint32_t gr_abi_version(void) { return GR_ABI_VERSION; }
uint32_t gr_protocol_version(void) { return static_cast<uint32_t>(gym_remote::kProtocolVersion); }
const char* gr_last_error(void) { return g_last_error.c_str(); }
const char* gr_last_error_type(void) { return g_last_type.c_str(); }
const char* gr_last_error_module(void) { return g_last_module.c_str(); }

static gr_log_sink g_log_sink = nullptr;  // the C sink behind the C++ one (set under the C++ log lock)

static void ToLogSink(void* user, gym_remote::LogLevel level, const char* message) {
  const int32_t number = level == gym_remote::LogLevel::kDebug  ? 0
                         : level == gym_remote::LogLevel::kInfo ? 1
                         : level == gym_remote::LogLevel::kWarning ? 2
                                                                   : 3;
  if (g_log_sink != nullptr) g_log_sink(user, number, message);
}

void gr_set_log_sink(gr_log_sink sink, void* user) {
  gym_remote::SetLogSink(nullptr, nullptr);
  g_log_sink = sink;
  if (sink != nullptr) gym_remote::SetLogSink(ToLogSink, user);
}

gr_status gr_set_log_level(int32_t level) {
  static const gym_remote::LogLevel levels[] = {gym_remote::LogLevel::kDebug, gym_remote::LogLevel::kInfo,
                                                gym_remote::LogLevel::kWarning, gym_remote::LogLevel::kError};
  if (level < 0 || level > 3) return Fail(GR_INVALID_ARGUMENT, "gr_set_log_level: level must be 0..3, got " + std::to_string(level));
  gym_remote::SetLogLevel(levels[level]);
  return GR_OK;
}

// -- values -------------------------------------------------------------------------------------------

gr_value* gr_none(void) { return GuardHandle<gr_value>("gr_none", [] { return New(Value()); }); }
gr_value* gr_bool(int32_t value) { return GuardHandle<gr_value>("gr_bool", [&] { return New(Value::Bool(value != 0)); }); }
gr_value* gr_int(int64_t value) { return GuardHandle<gr_value>("gr_int", [&] { return New(Value::Int(value)); }); }
gr_value* gr_uint(uint64_t value) { return GuardHandle<gr_value>("gr_uint", [&] { return New(Value::UInt(value)); }); }
gr_value* gr_float(double value) { return GuardHandle<gr_value>("gr_float", [&] { return New(Value::Float(value)); }); }

static gr_value* BigInt(const char* where, const char* text, bool hex) {
  return GuardHandle<gr_value>(where, [&]() -> gr_value* {
    if (Null(where, text, "the text")) return nullptr;
    Value value;
    const Status status = hex ? Value::BigIntFromHex(text, &value) : Value::IntFromDecimal(text, &value);
    if (!status.ok()) {
      Fail(GR_INVALID_ARGUMENT, std::string(where) + ": " + status.message());
      return nullptr;
    }
    return New(std::move(value));
  });
}
gr_value* gr_big_int_hex(const char* hex) { return BigInt("gr_big_int_hex", hex, true); }
gr_value* gr_big_int_decimal(const char* decimal) { return BigInt("gr_big_int_decimal", decimal, false); }

gr_value* gr_str(const char* utf8, size_t size) {
  return GuardHandle<gr_value>("gr_str", [&]() -> gr_value* {
    if (utf8 == nullptr && size > 0 && Null("gr_str", utf8, "the text")) return nullptr;
    std::string text(utf8 == nullptr ? "" : std::string(utf8, size));
    if (!gym_remote::ValidUtf8(text)) {
      Fail(GR_INVALID_ARGUMENT, "gr_str: the text is not valid UTF-8");
      return nullptr;
    }
    return New(Value::String(std::move(text)));
  });
}
gr_value* gr_str0(const char* utf8) { return utf8 == nullptr ? (Null("gr_str0", utf8, "the text"), nullptr) : gr_str(utf8, std::strlen(utf8)); }

gr_value* gr_bytes(const void* data, size_t size) {
  return GuardHandle<gr_value>("gr_bytes", [&]() -> gr_value* {
    if (data == nullptr && size > 0 && Null("gr_bytes", data, "the data")) return nullptr;
    return New(Value::Bytes(size == 0 ? std::string() : std::string(static_cast<const char*>(data), size)));
  });
}
gr_value* gr_list(void) { return GuardHandle<gr_value>("gr_list", [] { return New(Value::List()); }); }
gr_value* gr_tuple(void) { return GuardHandle<gr_value>("gr_tuple", [] { return New(Value::Tuple()); }); }
gr_value* gr_dict(void) { return GuardHandle<gr_value>("gr_dict", [] { return New(Value::Dict()); }); }
gr_value* gr_pair_dict(void) { return GuardHandle<gr_value>("gr_pair_dict", [] { return New(Value::PairDict({})); }); }

}  // extern "C"

// An array of `dtype` and `shape` holding `data` (copied), or zeros when `data` is NULL and zeros is set.
static gr_value* NewArray(const char* where, const char* dtype, const int64_t* shape, size_t ndim, const void* data,
                          bool zeros) {
  return GuardHandle<gr_value>(where, [&]() -> gr_value* {
    DType type;
    if (!Dtype(where, dtype, &type)) return nullptr;
    if (ndim > 0 && Null(where, shape, "the shape")) return nullptr;
    const gym_remote::Shape dims = ShapeOf(shape, ndim);
    size_t count = 0;
    if (ndim > 32 || !gym_remote::ShapeSize(dims, &count)) {
      Fail(GR_INVALID_ARGUMENT, std::string(where) + ": a shape needs at most 32 non-negative dimensions");
      return nullptr;
    }
    const size_t size = count * gym_remote::ItemSize(type);
    if (!zeros && size > 0 && Null(where, data, "the data")) return nullptr;
    std::string bytes = zeros ? std::string(size, '\0') : std::string(static_cast<const char*>(data), size);
    Value value;
    const Status status = Value::Array(type, dims, std::move(bytes), &value);
    if (!status.ok()) {
      Fail(GR_INVALID_ARGUMENT, std::string(where) + ": " + status.message());
      return nullptr;
    }
    return New(std::move(value));
  });
}

extern "C" {

gr_value* gr_array(const char* dtype, const int64_t* shape, size_t ndim, const void* data) {
  return NewArray("gr_array", dtype, shape, ndim, data, false);
}
gr_value* gr_array_zeros(const char* dtype, const int64_t* shape, size_t ndim) {
  return NewArray("gr_array_zeros", dtype, shape, ndim, nullptr, true);
}

void* gr_array_mutable_data(gr_value* value, size_t* size) {
  if (Null("gr_array_mutable_data", value, "the value")) return nullptr;
  if (value->kind() != Value::Kind::kArray) {
    WrongKind("gr_array_mutable_data", *value, "a numpy array");
    return nullptr;
  }
  // The value's own bytes (Value has no mutable accessor; the object is not const, so writing is sound).
  std::string& bytes = const_cast<std::string&>(value->data());
  if (size != nullptr) *size = bytes.size();
  return bytes.empty() ? nullptr : &bytes[0];
}

static gr_value* Scalar(const char* where, const char* dtype, int kind, int64_t i, uint64_t u, double d) {
  return GuardHandle<gr_value>(where, [&]() -> gr_value* {
    DType type;
    if (!Dtype(where, dtype, &type)) return nullptr;
    if (kind == 2 && !gym_remote::IsFloat(type)) {
      Fail(GR_INVALID_ARGUMENT, std::string(where) + ": " + dtype + " is not a float dtype");
      return nullptr;
    }
    if (kind != 2 && gym_remote::IsFloat(type)) {
      Fail(GR_INVALID_ARGUMENT, std::string(where) + ": " + dtype + " is not an integer dtype (gr_scalar_float)");
      return nullptr;
    }
    if (type == DType::kBool) return New(Value::ScalarBool(kind == 0 ? i != 0 : u != 0));
    if (kind == 0) return New(Value::ScalarInt(type, i));
    if (kind == 1) return New(Value::ScalarUInt(type, u));
    return New(Value::ScalarFloat(type, d));
  });
}
gr_value* gr_scalar_int(const char* dtype, int64_t value) { return Scalar("gr_scalar_int", dtype, 0, value, 0, 0); }
gr_value* gr_scalar_uint(const char* dtype, uint64_t value) { return Scalar("gr_scalar_uint", dtype, 1, 0, value, 0); }
gr_value* gr_scalar_float(const char* dtype, double value) { return Scalar("gr_scalar_float", dtype, 2, 0, 0, value); }
gr_value* gr_scalar_bool(int32_t value) {
  return GuardHandle<gr_value>("gr_scalar_bool", [&] { return New(Value::ScalarBool(value != 0)); });
}

gr_value* gr_object_array(const int64_t* shape, size_t ndim, const gr_value* items) {
  return GuardHandle<gr_value>("gr_object_array", [&]() -> gr_value* {
    if (Null("gr_object_array", items, "items")) return nullptr;
    if (items->kind() != Value::Kind::kList) {
      WrongKind("gr_object_array", *items, "a list of items");
      return nullptr;
    }
    if (ndim > 0 && Null("gr_object_array", shape, "the shape")) return nullptr;
    Value value;
    const Status status = Value::ObjectArray(ShapeOf(shape, ndim), items->items(), &value);
    if (!status.ok()) {
      Fail(GR_INVALID_ARGUMENT, "gr_object_array: " + status.message());
      return nullptr;
    }
    return New(std::move(value));
  });
}

gr_value* gr_graph(const gr_value* nodes, const gr_value* edges, const gr_value* edge_links) {
  return GuardHandle<gr_value>("gr_graph", [&]() -> gr_value* {
    if (Null("gr_graph", nodes, "nodes")) return nullptr;
    return New(Value::Graph(*nodes, edges ? Value(*edges) : Value(), edge_links ? Value(*edge_links) : Value()));
  });
}

gr_value* gr_value_copy(const gr_value* value) {
  return GuardHandle<gr_value>("gr_value_copy", [&]() -> gr_value* {
    if (Null("gr_value_copy", value, "the value")) return nullptr;
    return New(*value);
  });
}
void gr_value_free(gr_value* value) { delete value; }

gr_status gr_value_set(gr_value* target, const gr_value* source) {
  return Guard("gr_value_set", [&]() -> gr_status {
    if (Null("gr_value_set", target, "the target") || Null("gr_value_set", source, "the source")) return GR_INVALID_ARGUMENT;
    if (target != source) static_cast<Value&>(*target) = *source;
    return GR_OK;
  });
}

gr_status gr_value_take(gr_value* target, gr_value* source) {
  return Guard("gr_value_take", [&]() -> gr_status {
    if (Null("gr_value_take", target, "the target") || Null("gr_value_take", source, "the source")) return GR_INVALID_ARGUMENT;
    if (target == source) return Fail(GR_INVALID_ARGUMENT, "gr_value_take: target and source are the same value");
    static_cast<Value&>(*target) = std::move(static_cast<Value&>(*source));
    delete source;
    return GR_OK;
  });
}

}  // extern "C"

// `item` copied in, or (take) moved in and its handle freed whatever the outcome.
static gr_status Append(const char* where, gr_value* sequence, gr_value* item, bool take) {
  std::unique_ptr<gr_value> owned(take ? item : nullptr);
  return Guard(where, [&]() -> gr_status {
    if (Null(where, sequence, "the list") || Null(where, item, "the item")) return GR_INVALID_ARGUMENT;
    if (sequence->kind() != Value::Kind::kList && sequence->kind() != Value::Kind::kTuple) {
      return WrongKind(where, *sequence, "a list or tuple");
    }
    sequence->Append(take ? std::move(static_cast<Value&>(*item)) : Value(*item));
    return GR_OK;
  });
}

static gr_status DictSet(const char* where, gr_value* dict, const char* key, gr_value* item, bool take) {
  std::unique_ptr<gr_value> owned(take ? item : nullptr);
  return Guard(where, [&]() -> gr_status {
    if (Null(where, dict, "the dict") || Null(where, key, "the key") || Null(where, item, "the item")) {
      return GR_INVALID_ARGUMENT;
    }
    if (dict->kind() != Value::Kind::kDict) return WrongKind(where, *dict, "a dict (GR_DICT)");
    if (!gym_remote::ValidUtf8(key)) return Fail(GR_INVALID_ARGUMENT, std::string(where) + ": the key is not valid UTF-8");
    dict->Set(key, take ? std::move(static_cast<Value&>(*item)) : Value(*item));
    return GR_OK;
  });
}

extern "C" {

gr_status gr_list_append(gr_value* sequence, const gr_value* item) {
  return Append("gr_list_append", sequence, const_cast<gr_value*>(item), false);
}
gr_status gr_list_append_take(gr_value* sequence, gr_value* item) {
  return Append("gr_list_append_take", sequence, item, true);
}
gr_status gr_dict_set(gr_value* dict, const char* key, const gr_value* item) {
  return DictSet("gr_dict_set", dict, key, const_cast<gr_value*>(item), false);
}
gr_status gr_dict_set_take(gr_value* dict, const char* key, gr_value* item) {
  return DictSet("gr_dict_set_take", dict, key, item, true);
}

gr_status gr_pair_dict_add(gr_value* dict, const gr_value* key, const gr_value* item) {
  return Guard("gr_pair_dict_add", [&]() -> gr_status {
    if (Null("gr_pair_dict_add", dict, "the dict") || Null("gr_pair_dict_add", key, "the key") ||
        Null("gr_pair_dict_add", item, "the item")) {
      return GR_INVALID_ARGUMENT;
    }
    if (!dict->is_dict()) return WrongKind("gr_pair_dict_add", *dict, "a dict");
    if (!key->Hashable()) return Fail(GR_INVALID_ARGUMENT, "gr_pair_dict_add: unhashable key " + key->Repr());
    Value::Pairs pairs = dict->pairs();  // (an empty or all-str-keys pair dict is a GR_DICT)
    if (dict->kind() == Value::Kind::kDict) {
      for (const auto& entry : dict->entries()) pairs.emplace_back(Value::String(entry.first), entry.second);
    }
    pairs.emplace_back(*key, *item);
    static_cast<Value&>(*dict) = Value::PairDict(std::move(pairs));
    return GR_OK;
  });
}

gr_kind gr_kind_of(const gr_value* value) { return value == nullptr ? GR_NONE : static_cast<gr_kind>(value->kind()); }

size_t gr_len(const gr_value* value) {
  if (value == nullptr) return 0;
  switch (value->kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kObjectArray:
    case Value::Kind::kGraph: return value->items().size();
    case Value::Kind::kDict: return value->entries().size();
    case Value::Kind::kPairDict: return value->pairs().size();
    case Value::Kind::kArray:
    case Value::Kind::kScalar: return value->element_count();
    case Value::Kind::kString:
    case Value::Kind::kBytes: return value->text().size();
    default: return 0;
  }
}

static bool Is(const char* where, const gr_value* value, Value::Kind kind, const char* expected) {
  if (Null(where, value, "the value")) return false;
  if (value->kind() == kind) return true;
  WrongKind(where, *value, expected);
  return false;
}

gr_status gr_as_bool(const gr_value* value, int32_t* out) {
  if (!Is("gr_as_bool", value, Value::Kind::kBool, "a bool") || Null("gr_as_bool", out, "out")) return GR_INVALID_ARGUMENT;
  *out = value->as_bool() ? 1 : 0;
  return GR_OK;
}

gr_status gr_as_int64(const gr_value* value, int64_t* out) {
  if (!Is("gr_as_int64", value, Value::Kind::kInt, "an int in the signed 64-bit range") ||
      Null("gr_as_int64", out, "out")) {
    return GR_INVALID_ARGUMENT;
  }
  *out = value->as_int();
  return GR_OK;
}

gr_status gr_as_uint64(const gr_value* value, uint64_t* out) {
  if (Null("gr_as_uint64", value, "the value") || Null("gr_as_uint64", out, "out")) return GR_INVALID_ARGUMENT;
  if (value->kind() == Value::Kind::kInt && value->as_int() >= 0) {
    *out = static_cast<uint64_t>(value->as_int());
    return GR_OK;
  }
  const std::string& hex = value->text();
  if (value->kind() == Value::Kind::kBigInt && !hex.empty() && hex[0] != '-' && hex.size() <= 16) {
    *out = std::strtoull(hex.c_str(), nullptr, 16);
    return GR_OK;
  }
  return Fail(GR_INVALID_ARGUMENT, "gr_as_uint64: " + value->Repr().substr(0, 60) + " is not an int in [0, 2**64)");
}

gr_status gr_as_double(const gr_value* value, double* out) {
  if (!Is("gr_as_double", value, Value::Kind::kFloat, "a float") || Null("gr_as_double", out, "out")) return GR_INVALID_ARGUMENT;
  *out = value->as_float();
  return GR_OK;
}

const char* gr_big_int_hex_of(const gr_value* value) {
  return Is("gr_big_int_hex_of", value, Value::Kind::kBigInt, "a big int") ? value->text().c_str() : nullptr;
}

const char* gr_str_data(const gr_value* value, size_t* size) {
  if (Null("gr_str_data", value, "the value")) return nullptr;
  if (value->kind() != Value::Kind::kString && value->kind() != Value::Kind::kBytes) {
    WrongKind("gr_str_data", *value, "a str or bytes");
    return nullptr;
  }
  if (size != nullptr) *size = value->text().size();
  return value->text().c_str();
}

const gr_value* gr_item(const gr_value* value, size_t index) {
  if (Null("gr_item", value, "the value")) return nullptr;
  const Value::Kind kind = value->kind();
  if (kind != Value::Kind::kList && kind != Value::Kind::kTuple && kind != Value::Kind::kObjectArray &&
      kind != Value::Kind::kGraph) {
    WrongKind("gr_item", *value, "a list, tuple, object array or graph");
    return nullptr;
  }
  if (index >= value->items().size()) {
    Fail(GR_INVALID_ARGUMENT, "gr_item: index " + std::to_string(index) + " out of range for " +
                                  std::to_string(value->items().size()) + " items");
    return nullptr;
  }
  return static_cast<const gr_value*>(&value->items()[index]);
}

static bool Entry(const char* where, const gr_value* value, size_t index, Value::Kind kind) {
  if (!Is(where, value, kind, kind == Value::Kind::kDict ? "a dict" : "a pair dict")) return false;
  const size_t size = kind == Value::Kind::kDict ? value->entries().size() : value->pairs().size();
  if (index < size) return true;
  Fail(GR_INVALID_ARGUMENT,
       std::string(where) + ": index " + std::to_string(index) + " out of range for " + std::to_string(size) + " entries");
  return false;
}

const char* gr_dict_key(const gr_value* value, size_t index) {
  return Entry("gr_dict_key", value, index, Value::Kind::kDict) ? value->entries()[index].first.c_str() : nullptr;
}

const char* gr_dict_key_data(const gr_value* value, size_t index, size_t* size) {
  if (size != nullptr) *size = 0;
  if (Null("gr_dict_key_data", size, "size") || !Entry("gr_dict_key_data", value, index, Value::Kind::kDict)) return nullptr;
  const std::string& key = value->entries()[index].first;
  *size = key.size();
  return key.c_str();
}

const gr_value* gr_dict_value(const gr_value* value, size_t index) {
  if (value != nullptr && value->kind() == Value::Kind::kPairDict) {
    return Entry("gr_dict_value", value, index, Value::Kind::kPairDict)
               ? static_cast<const gr_value*>(&value->pairs()[index].second)
               : nullptr;
  }
  return Entry("gr_dict_value", value, index, Value::Kind::kDict)
             ? static_cast<const gr_value*>(&value->entries()[index].second)
             : nullptr;
}

const gr_value* gr_pair_key(const gr_value* value, size_t index) {
  return Entry("gr_pair_key", value, index, Value::Kind::kPairDict)
             ? static_cast<const gr_value*>(&value->pairs()[index].first)
             : nullptr;
}

const gr_value* gr_dict_find(const gr_value* value, const char* key) {
  if (Null("gr_dict_find", value, "the value") || Null("gr_dict_find", key, "the key")) return nullptr;
  if (!value->is_dict()) {
    WrongKind("gr_dict_find", *value, "a dict");
    return nullptr;
  }
  return static_cast<const gr_value*>(value->Find(key));
}

static bool Numpy(const char* where, const gr_value* value) {
  if (Null(where, value, "the value")) return false;
  if (value->kind() == Value::Kind::kArray || value->kind() == Value::Kind::kScalar) return true;
  WrongKind(where, *value, "a numpy array or scalar");
  return false;
}

const char* gr_array_dtype(const gr_value* value) {
  return Numpy("gr_array_dtype", value) ? gym_remote::DTypeStr(value->dtype()) : nullptr;
}

const int64_t* gr_array_shape(const gr_value* value, size_t* ndim) {
  if (Null("gr_array_shape", value, "the value")) return nullptr;
  if (value->kind() != Value::Kind::kObjectArray && !Numpy("gr_array_shape", value)) return nullptr;
  if (ndim != nullptr) *ndim = value->kind() == Value::Kind::kScalar ? 0 : value->shape().size();
  return value->shape().empty() ? nullptr : value->shape().data();
}

const void* gr_array_data(const gr_value* value, size_t* size) {
  if (!Numpy("gr_array_data", value)) return nullptr;
  if (size != nullptr) *size = value->data().size();
  return value->data().data();
}

size_t gr_array_nbytes(const gr_value* value) {
  return value != nullptr && (value->kind() == Value::Kind::kArray || value->kind() == Value::Kind::kScalar)
             ? value->data().size()
             : 0;
}

gr_status gr_array_copy(const gr_value* value, void* out, size_t capacity) {
  if (!Numpy("gr_array_copy", value)) return GR_INVALID_ARGUMENT;
  const size_t size = value->data().size();
  if (capacity < size) {
    return Fail(GR_INVALID_ARGUMENT, "gr_array_copy: the array has " + std::to_string(size) + " bytes, room for " +
                                         std::to_string(capacity));
  }
  if (size > 0 && Null("gr_array_copy", out, "out")) return GR_INVALID_ARGUMENT;
  if (size > 0) std::memcpy(out, value->data().data(), size);
  return GR_OK;
}

gr_status gr_to_int64(const gr_value* value, int64_t* out) {
  return Guard("gr_to_int64", [&]() -> gr_status {
    if (Null("gr_to_int64", value, "the value") || Null("gr_to_int64", out, "out")) return GR_INVALID_ARGUMENT;
    return FromStatus(value->ToInt64(out));
  });
}

gr_status gr_to_double(const gr_value* value, double* out) {
  return Guard("gr_to_double", [&]() -> gr_status {
    if (Null("gr_to_double", value, "the value") || Null("gr_to_double", out, "out")) return GR_INVALID_ARGUMENT;
    return FromStatus(value->ToDouble(out));
  });
}

}  // extern "C"

// The numbers of a value into the caller's buffer (Value::ToDoubles, Value::ToInt64s).
template <typename T, typename Read>
static gr_status Numbers(const char* where, const gr_value* value, T* out, size_t capacity, size_t* count, Read read) {
  return Guard(where, [&]() -> gr_status {
    if (Null(where, value, "the value")) return GR_INVALID_ARGUMENT;
    std::vector<T> numbers;
    const gr_status status = FromStatus(read(*value, &numbers));
    if (status != GR_OK) return status;
    if (count != nullptr) *count = numbers.size();
    const size_t n = numbers.size() < capacity ? numbers.size() : capacity;
    if (n > 0 && Null(where, out, "out")) return GR_INVALID_ARGUMENT;
    if (n > 0) std::memcpy(out, numbers.data(), n * sizeof(T));
    return GR_OK;
  });
}

extern "C" {

gr_status gr_to_doubles(const gr_value* value, double* out, size_t capacity, size_t* count) {
  return Numbers("gr_to_doubles", value, out, capacity, count,
                 [](const Value& v, std::vector<double>* numbers) { return v.ToDoubles(numbers); });
}

gr_status gr_to_int64s(const gr_value* value, int64_t* out, size_t capacity, size_t* count) {
  return Numbers("gr_to_int64s", value, out, capacity, count,
                 [](const Value& v, std::vector<std::int64_t>* numbers) { return v.ToInt64s(numbers); });
}

int32_t gr_value_equal(const gr_value* a, const gr_value* b) {
  if (a == nullptr || b == nullptr) return a == b;
  return static_cast<const Value&>(*a) == static_cast<const Value&>(*b) ? 1 : 0;
}

char* gr_value_repr(const gr_value* value) {
  char* out = nullptr;
  Guard("gr_value_repr", [&]() -> gr_status {
    const std::string text = value == nullptr ? "None" : value->Repr();
    out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out == nullptr) return Fail(GR_INTERNAL, "gr_value_repr: out of memory");
    std::memcpy(out, text.c_str(), text.size() + 1);
    return GR_OK;
  });
  return out;
}
void gr_string_free(char* text) { std::free(text); }

// -- spaces -------------------------------------------------------------------------------------------

static gr_space* NewSpace(Space space) {
  gr_space* out = new gr_space;
  out->space = std::move(space);
  return out;
}

gr_space* gr_space_box(double low, double high, const int64_t* shape, size_t ndim, const char* dtype) {
  return GuardHandle<gr_space>("gr_space_box", [&]() -> gr_space* {
    DType type;
    if (!Dtype("gr_space_box", dtype, &type)) return nullptr;
    if (ndim > 0 && Null("gr_space_box", shape, "the shape")) return nullptr;
    return NewSpace(Space::Box(low, high, ShapeOf(shape, ndim), type));
  });
}

gr_space* gr_space_box_bounds(const double* low, const double* high, size_t n, const char* dtype) {
  return GuardHandle<gr_space>("gr_space_box_bounds", [&]() -> gr_space* {
    DType type;
    if (!Dtype("gr_space_box_bounds", dtype, &type)) return nullptr;
    if (n > 0 && (Null("gr_space_box_bounds", low, "low") || Null("gr_space_box_bounds", high, "high"))) return nullptr;
    return NewSpace(Space::Box(std::vector<double>(low, low + n), std::vector<double>(high, high + n), type));
  });
}

gr_space* gr_space_discrete(int64_t n, int64_t start, const char* dtype) {
  return GuardHandle<gr_space>("gr_space_discrete", [&]() -> gr_space* {
    DType type;
    if (!Dtype("gr_space_discrete", dtype, &type)) return nullptr;
    if (n <= 0) {
      Fail(GR_INVALID_ARGUMENT, "gr_space_discrete: n must be positive, got " + std::to_string(n));
      return nullptr;
    }
    return NewSpace(Space::Discrete(n, start, type));
  });
}

gr_space* gr_space_multi_discrete(const int64_t* nvec, const int64_t* start, size_t n, const char* dtype) {
  return GuardHandle<gr_space>("gr_space_multi_discrete", [&]() -> gr_space* {
    DType type;
    if (!Dtype("gr_space_multi_discrete", dtype, &type)) return nullptr;
    if (n > 0 && Null("gr_space_multi_discrete", nvec, "nvec")) return nullptr;
    std::vector<std::int64_t> starts;
    if (start != nullptr) starts.assign(start, start + n);
    return NewSpace(Space::MultiDiscrete(std::vector<std::int64_t>(nvec, nvec + n), starts, type));
  });
}

gr_space* gr_space_multi_binary(const int64_t* shape, size_t ndim) {
  return GuardHandle<gr_space>("gr_space_multi_binary", [&]() -> gr_space* {
    if (ndim == 0 || Null("gr_space_multi_binary", shape, "the shape")) {
      if (ndim == 0) Fail(GR_INVALID_ARGUMENT, "gr_space_multi_binary: the shape needs a dimension");
      return nullptr;
    }
    return NewSpace(ndim == 1 ? Space::MultiBinary(shape[0]) : Space::MultiBinary(ShapeOf(shape, ndim)));
  });
}

gr_space* gr_space_dict(void) {
  return GuardHandle<gr_space>("gr_space_dict", [] {
    gr_space* out = NewSpace(Space::Dict({}));
    out->dict = true;
    return out;
  });
}
gr_space* gr_space_tuple(void) { return GuardHandle<gr_space>("gr_space_tuple", [] { return NewSpace(Space::Tuple({})); }); }

static gr_status AddChild(const char* where, gr_space* parent, const char* key, const gr_space* child, bool dict) {
  return Guard(where, [&]() -> gr_status {
    if (Null(where, parent, "the space") || Null(where, child, "the child")) return GR_INVALID_ARGUMENT;
    if (dict && Null(where, key, "the key")) return GR_INVALID_ARGUMENT;
    if (parent->dict != dict || (parent->space.kind() != Space::Kind::kDict && parent->space.kind() != Space::Kind::kTuple)) {
      return Fail(GR_INVALID_ARGUMENT, std::string(where) + ": the space is not a " + (dict ? "Dict" : "Tuple"));
    }
    parent->children.emplace_back(dict ? key : "", child->space);
    if (dict) {
      parent->space = Space::Dict(parent->children);
    } else {
      std::vector<Space> spaces;
      for (const auto& entry : parent->children) spaces.push_back(entry.second);
      parent->space = Space::Tuple(std::move(spaces));
    }
    return GR_OK;
  });
}
gr_status gr_space_dict_add(gr_space* dict, const char* key, const gr_space* child) {
  return AddChild("gr_space_dict_add", dict, key, child, true);
}
gr_status gr_space_tuple_add(gr_space* tuple, const gr_space* child) {
  return AddChild("gr_space_tuple_add", tuple, nullptr, child, false);
}

gr_value* gr_space_describe(const gr_space* space) {
  return GuardHandle<gr_value>("gr_space_describe", [&]() -> gr_value* {
    if (Null("gr_space_describe", space, "the space")) return nullptr;
    return New(space->space.Describe());
  });
}
void gr_space_free(gr_space* space) { delete space; }

// -- options ------------------------------------------------------------------------------------------

gr_options* gr_options_new(void) { return GuardHandle<gr_options>("gr_options_new", [] { return new gr_options; }); }
void gr_options_free(gr_options* options) { delete options; }

gr_status gr_options_set_endpoint(gr_options* options, const char* endpoint) {
  return Guard("gr_options_set_endpoint", [&]() -> gr_status {
    if (Null("gr_options_set_endpoint", options, "options") || Null("gr_options_set_endpoint", endpoint, "endpoint")) {
      return GR_INVALID_ARGUMENT;
    }
    const gr_status status = FromStatus(gym_remote::CheckEndpoint(endpoint));
    if (status == GR_OK) options->options.endpoint = endpoint;
    return status;
  });
}

gr_status gr_options_set_name(gr_options* options, const char* name) {
  return Guard("gr_options_set_name", [&]() -> gr_status {
    if (Null("gr_options_set_name", options, "options") || Null("gr_options_set_name", name, "name")) return GR_INVALID_ARGUMENT;
    options->options.name = name;
    return GR_OK;
  });
}

gr_status gr_options_set_seconds(gr_options* options, int32_t which, double seconds) {
  if (Null("gr_options_set_seconds", options, "options")) return GR_INVALID_ARGUMENT;
  gym_remote::ClientOptions& o = options->options;
  switch (which) {
    case GR_CONNECT_TIMEOUT: o.connect_timeout = seconds; return GR_OK;
    case GR_SLOT_TIMEOUT: o.slot_timeout = seconds; return GR_OK;
    case GR_RECONNECT_TIMEOUT: o.reconnect_timeout = seconds; return GR_OK;
    case GR_LIVENESS_TIMEOUT:
      if (!(seconds > 0) || seconds > 1e9) {
        return Fail(GR_INVALID_ARGUMENT, "gr_options_set_seconds: the liveness timeout must be a positive finite "
                                         "number of seconds");
      }
      o.liveness_timeout = seconds;
      return GR_OK;
    case GR_SPIN:
      if (!(seconds >= 0) || seconds > 1e9) return Fail(GR_INVALID_ARGUMENT, "gr_options_set_seconds: the spin must be >= 0 and finite");
      o.spin = seconds;
      return GR_OK;
    default: return Fail(GR_INVALID_ARGUMENT, "gr_options_set_seconds: unknown option " + std::to_string(which));
  }
}

gr_status gr_options_set_flag(gr_options* options, int32_t which, int32_t on) {
  if (Null("gr_options_set_flag", options, "options")) return GR_INVALID_ARGUMENT;
  switch (which) {
    case GR_WAIT_FOR_SLOT: options->options.wait_for_slot = on != 0; return GR_OK;
    case GR_RECONNECT: options->options.reconnect = on != 0; return GR_OK;
    case GR_DATA_PLANE: options->options.data_plane = on != 0; return GR_OK;
    default: return Fail(GR_INVALID_ARGUMENT, "gr_options_set_flag: unknown option " + std::to_string(which));
  }
}

gr_status gr_options_set_security(gr_options* options, const char* server_key, const char* client_key,
                                  const char* secret) {
  return Guard("gr_options_set_security", [&]() -> gr_status {
    if (Null("gr_options_set_security", options, "options")) return GR_INVALID_ARGUMENT;
    gym_remote::ClientOptions updated = options->options;
    updated.server_public_key.clear();
    updated.client_keys = gym_remote::KeyPair();
    const gr_status status = FromStatus(gym_remote::ConfigureSecurity(
        server_key ? server_key : "", client_key ? client_key : "", secret ? secret : "", &updated));
    if (status == GR_OK) options->options = std::move(updated);
    return status;
  });
}

gr_status gr_options_set_secret_file(gr_options* options, const char* path) {
  return Guard("gr_options_set_secret_file", [&]() -> gr_status {
    if (Null("gr_options_set_secret_file", options, "options") || Null("gr_options_set_secret_file", path, "path")) {
      return GR_INVALID_ARGUMENT;
    }
    std::string secret;
    const gr_status status = FromStatus(gym_remote::ReadSecretFile(path, &secret));
    return status != GR_OK ? status : gr_options_set_security(options, nullptr, nullptr, secret.c_str());
  });
}

// -- env results --------------------------------------------------------------------------------------

gr_status gr_error_set(gr_error* error, const char* type, const char* module, const char* message) {
  return Guard("gr_error_set", [&]() -> gr_status {
    if (Null("gr_error_set", error, "the error") || Null("gr_error_set", type, "the type")) return GR_INVALID_ARGUMENT;
    error->status = Status::EnvError(type, message ? message : "", module ? module : "builtins");
    return GR_OK;
  });
}

}  // extern "C"

// A step's result from the caller's values: copied, or (take) moved and their handles freed whatever the outcome.
static gr_status FillResult(const char* where, gym_remote::StepResult* result, gr_value* observation, double reward,
                            int32_t terminated, int32_t truncated, gr_value* info, bool take) {
  std::unique_ptr<gr_value> owned_observation(take ? observation : nullptr), owned_info(take ? info : nullptr);
  if (Null(where, observation, "the observation")) return GR_INVALID_ARGUMENT;
  if (info != nullptr && !info->is_dict()) return WrongKind(where, *info, "a dict info");
  result->observation = take ? std::move(static_cast<Value&>(*observation)) : Value(*observation);
  result->reward = reward;
  result->terminated = terminated != 0;
  result->truncated = truncated != 0;
  result->info = info == nullptr ? Value::Dict() : take ? std::move(static_cast<Value&>(*info)) : Value(*info);
  return GR_OK;
}

static gr_status SetResult(const char* where, gr_step_result* result, gr_value* observation, double reward,
                           int32_t terminated, int32_t truncated, gr_value* info, bool take) {
  return Guard(where, [&]() -> gr_status {
    if (Null(where, result, "the result")) {
      if (take) {
        delete observation;
        delete info;
      }
      return GR_INVALID_ARGUMENT;
    }
    return FillResult(where, &result->result, observation, reward, terminated, truncated, info, take);
  });
}

extern "C" {

gr_status gr_step_result_set(gr_step_result* result, const gr_value* observation, double reward, int32_t terminated,
                             int32_t truncated, const gr_value* info) {
  return SetResult("gr_step_result_set", result, const_cast<gr_value*>(observation), reward, terminated, truncated,
                   const_cast<gr_value*>(info), false);
}
gr_status gr_step_result_take(gr_step_result* result, gr_value* observation, double reward, int32_t terminated,
                              int32_t truncated, gr_value* info) {
  return SetResult("gr_step_result_take", result, observation, reward, terminated, truncated, info, true);
}

// -- the client ---------------------------------------------------------------------------------------

gr_client* gr_client_new(const gr_options* options, size_t num_envs, const gr_space* observation_space,
                         const gr_space* action_space, const gr_env_callbacks* callbacks, void* user) {
  return GuardHandle<gr_client>("gr_client_new", [&]() -> gr_client* {
    const char* where = "gr_client_new";
    if (Null(where, options, "options") || Null(where, observation_space, "the observation space") ||
        Null(where, action_space, "the action space") || Null(where, callbacks, "callbacks")) {
      return nullptr;
    }
    // A struct of an older (shorter) version is taken as far as it goes; none is older than version 1's.
    if (callbacks->struct_size < offsetof(gr_env_callbacks, close) + sizeof(callbacks->close) ||
        callbacks->struct_size > 4096) {
      Fail(GR_INVALID_ARGUMENT, "gr_client_new: callbacks->struct_size must be sizeof(gr_env_callbacks)");
      return nullptr;
    }
    if (num_envs == 0 || num_envs > 65535) {
      Fail(GR_INVALID_ARGUMENT, "gr_client_new: num_envs must be 1..65535, got " + std::to_string(num_envs));
      return nullptr;
    }
    if (callbacks->metadata != nullptr && callbacks->metadata->kind() != Value::Kind::kDict) {
      WrongKind(where, *callbacks->metadata, "a dict metadata");
      return nullptr;
    }
    auto client = std::make_unique<gr_client>();
    Shared& shared = client->shared;
    std::memcpy(&shared.callbacks, callbacks, std::min<size_t>(callbacks->struct_size, sizeof(gr_env_callbacks)));
    shared.user = user;
    shared.observation_space = observation_space->space;
    shared.action_space = action_space->space;
    if (callbacks->class_name != nullptr) shared.class_name = callbacks->class_name;
    if (callbacks->metadata != nullptr) shared.metadata = *callbacks->metadata;
    if (callbacks->render_mode != nullptr) shared.render_mode = std::string(callbacks->render_mode);
    shared.callbacks.metadata = nullptr;  // copied above; the caller's may go
    shared.callbacks.class_name = nullptr;
    shared.callbacks.render_mode = nullptr;
    std::vector<gym_remote::Env*> pointers;
    for (size_t i = 0; i < num_envs; ++i) {
      client->envs.push_back(std::make_unique<CEnv>(&client->shared, i));
      pointers.push_back(client->envs.back().get());
    }
    client->client = std::make_unique<gym_remote::Client>(options->options, std::move(pointers));
    return client.release();
  });
}

static bool NoClient(const char* where, const gr_client* client) { return Null(where, client, "the client"); }

gr_status gr_client_start(gr_client* client) {
  return Guard("gr_client_start", [&]() -> gr_status {
    if (NoClient("gr_client_start", client)) return GR_INVALID_ARGUMENT;
    return FromStatus(client->client->Start());
  });
}

gr_status gr_client_pump(gr_client* client, double max_wait_seconds) {
  return Guard("gr_client_pump", [&]() -> gr_status {
    if (NoClient("gr_client_pump", client)) return GR_INVALID_ARGUMENT;
    return FromStatus(client->client->Pump(max_wait_seconds));
  });
}

gr_status gr_client_run(gr_client* client) {
  return Guard("gr_client_run", [&]() -> gr_status {
    if (NoClient("gr_client_run", client)) return GR_INVALID_ARGUMENT;
    gr_status status = FromStatus(client->client->Start());
    while (status == GR_OK && gr_client_state(client) < GR_STATE_CLOSED) status = FromStatus(client->client->Pump(1.0));
    return status;
  });
}

gr_state gr_client_state(const gr_client* client) {
  return client == nullptr ? GR_STATE_FAILED : static_cast<gr_state>(client->client->state());
}

const char* gr_client_error(const gr_client* client) {
  if (client == nullptr) return "";
  gr_client* self = const_cast<gr_client*>(client);
  try {
    self->error = client->client->final_status().message();
  } catch (...) {
    self->error.clear();
  }
  return self->error.c_str();
}

void gr_client_request_stop(gr_client* client) {
  if (client != nullptr) client->client->RequestStop();
}

int64_t gr_client_pending_env(const gr_client* client) { return client == nullptr ? -1 : client->client->pending_env(); }

gr_status gr_client_complete_step(gr_client* client, size_t env, const gr_value* observation, double reward,
                                  int32_t terminated, int32_t truncated, const gr_value* info) {
  return Guard("gr_client_complete_step", [&]() -> gr_status {
    if (NoClient("gr_client_complete_step", client)) return GR_INVALID_ARGUMENT;
    gym_remote::StepResult result;
    const gr_status status = FillResult("gr_client_complete_step", &result, const_cast<gr_value*>(observation),
                                        reward, terminated, truncated, const_cast<gr_value*>(info), false);
    if (status != GR_OK) return status;
    return FromStatus(client->client->CompleteStep(env, Status::Ok(), std::move(result)));
  });
}

gr_status gr_client_fail_step(gr_client* client, size_t env, const char* type, const char* module,
                              const char* message) {
  return Guard("gr_client_fail_step", [&]() -> gr_status {
    if (NoClient("gr_client_fail_step", client) || Null("gr_client_fail_step", type, "the type")) {
      return GR_INVALID_ARGUMENT;
    }
    const Status error = Status::EnvError(type, message ? message : "", module ? module : "builtins");
    return FromStatus(client->client->CompleteStep(env, error, gym_remote::StepResult()));
  });
}

size_t gr_client_slots(const gr_client* client, int64_t* out, size_t capacity) {
  if (client == nullptr) return 0;
  try {
    const std::vector<std::int64_t> slots = client->client->slots();
    for (size_t i = 0; i < slots.size() && i < capacity && out != nullptr; ++i) out[i] = slots[i];
    return slots.size();
  } catch (...) {
    return 0;
  }
}

void gr_client_free(gr_client* client) {
  try {
    delete client;  // ~Client leaves (BYE) and closes the envs if it still runs
  } catch (...) {
  }
}

}  // extern "C"
