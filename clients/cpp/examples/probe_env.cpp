#include "probe_env.hpp"

#include <cstdio>
#include <limits>
#include <vector>

#include "seed_words.hpp"

namespace probe {

using gym_remote::DType;
using gym_remote::Space;
using gym_remote::Status;
using gym_remote::Value;

namespace {

constexpr std::int64_t kEpisodeLimit = 5;  // every episode is truncated at this step

std::int64_t Mod(std::int64_t a, std::int64_t b) { return ((a % b) + b) % b; }  // Python's %

// 2**64 + t, an int beyond 64 bits (it travels with tag "i").
Value BigIntPlus(std::int64_t t) {
  char hex[40];
  std::snprintf(hex, sizeof(hex), "1%016llx", static_cast<unsigned long long>(t));
  Value value;
  Value::BigIntFromHex(hex, &value);
  return value;
}

}  // namespace

ProbeEnv::ProbeEnv(std::optional<std::string> render_mode)
    : render_mode_(std::move(render_mode)), observation_space_(ObservationSpace()), action_space_(ActionSpace()) {}

Space ProbeEnv::ObservationSpace() {
  const double inf = std::numeric_limits<double>::infinity();
  return Space::Dict({
      {"zeta", Space::Box(-inf, inf, {2}, DType::kFloat32)},
      {"alpha", Space::Discrete(16, -3)},
      {"mid", Space::Tuple({Space::MultiDiscrete({4, 6}), Space::MultiBinary(3)})},
  });
}

Space ProbeEnv::ActionSpace() {
  return Space::Tuple({Space::Discrete(3, -1), Space::Box(-1.0, 1.0, {2}, DType::kFloat32), Space::MultiBinary(2)});
}

Value ProbeEnv::metadata() const {
  return Value::Dict({{"render_modes", Value::List({Value::String("ansi")})}, {"render_fps", Value::Int(4)}});
}

Status ProbeEnv::reset(const std::optional<std::int64_t>& seed, const Value* options, Value* observation,
                       Value* info) {
  return reset_any_seed(seed ? Value::Int(*seed) : Value(), options, observation, info);
}

Status ProbeEnv::reset_any_seed(const Value& seed, const Value* options, Value* observation, Value* info) {
  if (seed.kind() == Value::Kind::kInt) {
    draw_ = Mod(seed.as_int(), 1000);
  } else if (seed.kind() == Value::Kind::kBigInt) {  // beyond the int64 range, so positive (the client refuses < 0)
    draw_ = seed_words::Remainder(seed_words::SeedWords(seed), 1000);
  } else {
    draw_ = (draw_ * 37 + 11) % 1000;
  }
  std::int64_t offset = 0;
  const Value* given = options != nullptr ? options->Find("offset") : nullptr;
  if (given != nullptr) {
    if (given->kind() != Value::Kind::kInt || given->as_int() < 0 || given->as_int() >= 1000) {
      return gym_remote::ValueError("options['offset'] must be an int in [0, 1000), not " + given->Repr());
    }
    offset = given->as_int();
  }
  base_ = draw_ + offset;
  level_ = base_ % 7;
  t_ = 0;
  term_step_ = 2 + base_ % 5;
  zeta_[0] = static_cast<float>(static_cast<double>(base_) / 4.0);
  zeta_[1] = static_cast<float>(static_cast<double>(-base_) / 8.0);
  bits_[0] = bits_[1] = 0;
  *observation = Observation();
  *info = Value::Dict({{"base", Value::Int(base_)}, {"seeded", Value::Bool(!seed.is_none())},
                       {"offset", Value::Int(offset)}});
  return Status::Ok();
}

Status ProbeEnv::step(const Value& action, gym_remote::StepResult* result) {
  if ((action.kind() != Value::Kind::kTuple && action.kind() != Value::Kind::kList) || action.items().size() != 3) {
    return gym_remote::TypeError("the probe's action is (direction, push, pressed), got " + action.Repr());
  }
  std::int64_t direction = 0;
  GYM_REMOTE_RETURN_IF_ERROR(action.items()[0].ToInt64(&direction));
  std::vector<double> push;  // np.asarray(push, dtype=np.float32), whatever dtype it arrives in
  GYM_REMOTE_RETURN_IF_ERROR(action.items()[1].ToDoubles(&push));
  if (push.size() != 1 && push.size() != 2) {
    return gym_remote::ValueError("operands could not be broadcast together with shapes (2,) (" +
                                  std::to_string(push.size()) + ",)");
  }
  std::vector<std::int64_t> pressed;  // np.asarray(bits, dtype=np.int8)
  GYM_REMOTE_RETURN_IF_ERROR(action.items()[2].ToInt64s(&pressed));
  if (pressed.size() < 2) {
    return Status::EnvError("IndexError", "index " + std::to_string(pressed.size()) +
                                              " is out of bounds for axis 0 with size " +
                                              std::to_string(pressed.size()));
  }
  bits_[0] = static_cast<std::int8_t>(pressed[0]);
  bits_[1] = static_cast<std::int8_t>(pressed[1]);
  t_ += 1;
  level_ += direction;
  for (int i = 0; i < 2; ++i) {  // IEEE float32: zeta + float32(push * 0.5)
    const float p = static_cast<float>(push[push.size() == 1 ? 0 : static_cast<std::size_t>(i)]);
    const float half = p * 0.5f;
    zeta_[i] = zeta_[i] + half;
  }
  const std::int64_t t = t_;
  if (t >= 256) return gym_remote::ValueError("bytes must be in range(0, 256)");
  result->reward = static_cast<double>(level_) + 0.25 * static_cast<double>(bits_[0] + 2 * bits_[1]);
  result->terminated = t == term_step_;
  result->truncated = t >= kEpisodeLimit;
  Value info = Value::Dict();
  info.Set("t", Value::Int(t));
  info.Set("half", Value::Float(static_cast<double>(t) / 2.0));
  info.Set("even", Value::Bool(t % 2 == 0));
  info.Set("level", Value::ScalarInt(DType::kInt32, level_));
  info.Set("quarter", Value::ScalarFloat(DType::kFloat32, static_cast<double>(t) / 4.0));
  info.Set("vec", Value::ArrayOf(DType::kInt16, {2}, std::vector<std::int64_t>{t, -t}));
  info.Set("pair", Value::Tuple({Value::Int(t), Value::String("x")}));
  info.Set("items", Value::List({BigIntPlus(t), Value(), Value::Float(1.5)}));
  info.Set("none", Value());
  info.Set("nan", Value::Float(std::numeric_limits<double>::quiet_NaN()));
  info.Set("blob", Value::Bytes(std::string{static_cast<char>(t), '\0', static_cast<char>(255)}));
  info.Set("name", Value::String("prob\xc3\xa9"));
  if (t % 2 == 1) {
    info.Set("odd", Value::Dict({{"t", Value::Int(t)}, {"inf", Value::Float(std::numeric_limits<double>::infinity())}}));
  }
  result->observation = Observation();
  result->info = std::move(info);
  return Status::Ok();
}

Status ProbeEnv::render(Value* frame) {
  if (render_mode_ && *render_mode_ == "ansi") {
    *frame = Value::String("t=" + std::to_string(t_) + " base=" + std::to_string(base_));
  } else {
    *frame = Value();
  }
  return Status::Ok();
}

Value ProbeEnv::Observation() const {
  const std::int64_t b = base_, t = t_;
  return Value::Dict({
      {"zeta", Value::ArrayOf(DType::kFloat32, {2}, std::vector<float>{zeta_[0], zeta_[1]})},
      {"alpha", Value::ScalarInt(DType::kInt64, -3 + (b + t) % 16)},
      {"mid", Value::Tuple({Value::ArrayOf(DType::kInt64, {2}, std::vector<std::int64_t>{(b + t) % 4, (3 * b + t) % 6}),
                            Value::ArrayOf(DType::kInt8, {3},
                                           std::vector<std::int64_t>{bits_[0], bits_[1], (b + t) % 2})})},
  });
}

}  // namespace probe
