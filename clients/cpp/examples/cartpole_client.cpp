// gym_remote_cartpole_client: Gymnasium's CartPole-v1, in C++, served to a RemoteVectorEnv.
//
// This is the file to copy to put your own simulator behind gym_remote: implement gym_remote::Env
// (spaces, reset, step), then hand your envs to the client. On the learner's side:
//
//   import gymnasium as gym
//   from gym_remote import RemoteVectorEnv
//   single = gym.make("CartPole-v1")
//   envs = RemoteVectorEnv(num_envs=8, bind="tcp://127.0.0.1:5555",
//                          observation_space=single.observation_space, action_space=single.action_space)
//   obs, infos = envs.reset(seed=0)        # waits until clients serve all 8 slots
//
// and on the simulator's: gym_remote_cartpole_client tcp://127.0.0.1:5555 --num-envs 4  (twice).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "command_line.hpp"
#include "numpy_random.hpp"
#include "seed_words.hpp"
#include "gym_remote/env.hpp"

namespace {

using gym_remote::DType;
using gym_remote::Space;
using gym_remote::Status;
using gym_remote::StepResult;
using gym_remote::Value;

// CartPole-v1 (gymnasium/envs/classic_control/cartpole.py): Euler integration, reward 1 per step
// (also on the step that terminates), truncated after 500 steps (the TimeLimit of gym.make).
class CartPole : public gym_remote::Env {
 public:
  CartPole() {
    const double inf = std::numeric_limits<double>::infinity();
    // Box(-high, high, float32) with high = [2 * x_threshold, inf, 2 * theta_threshold, inf]
    const std::vector<double> high = {kXThreshold * 2, inf, kThetaThreshold * 2, inf};
    const std::vector<double> low = {-high[0], -high[1], -high[2], -high[3]};
    observation_space_ = Space::Box(low, high, DType::kFloat32);
    action_space_ = Space::Discrete(2);
  }

  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  std::string class_name() const override { return "CartPoleEnv"; }
  Value metadata() const override {
    return Value::Dict({{"render_modes", Value::List({Value::String("human"), Value::String("rgb_array")})},
                        {"render_fps", Value::Int(50)}});
  }

  // env.state, readable and settable from the learner (envs.get_attr("state"), envs.set_attr("state", ...)):
  // the same attribute as Gymnasium's CartPoleEnv.state, a float64 array of 4.
  bool get_attr(const std::string& name, Value* value) override {
    if (name != "state") return false;
    *value = Value::ArrayOf(DType::kFloat64, {4}, std::vector<double>(state_.begin(), state_.end()));
    return true;
  }
  bool set_attr(const std::string& name, const Value& value) override {
    std::vector<double> numbers;
    if (name != "state" || !value.ToDoubles(&numbers).ok() || numbers.size() != 4) return false;
    std::copy(numbers.begin(), numbers.end(), state_.begin());
    return true;
  }

  // As Gymnasium's: the state drawn from uniform(-0.05, 0.05), or from options {"low": .., "high": ..},
  // by numpy's generator seeded as env.np_random is, so that a seed makes the same episode as in Python.
  Status reset(const std::optional<std::int64_t>& seed, const Value* options, Value* observation,
               Value* info) override {
    return reset_any_seed(seed ? Value::Int(*seed) : Value(), options, observation, info);
  }

  // Seeds of any size, as Gymnasium's (SeedSequence takes any non-negative int).
  Status reset_any_seed(const Value& seed, const Value* options, Value* observation, Value* info) override {
    double low = -0.05, high = 0.05;
    if (options != nullptr && options->kind() == Value::Kind::kDict) {
      const Value* given_low = options->Find("low");
      const Value* given_high = options->Find("high");
      if ((given_low && !given_low->ToDouble(&low).ok()) || (given_high && !given_high->ToDouble(&high).ok())) {
        return gym_remote::ValueError("the reset options 'low' and 'high' must be numbers");
      }
      if (low > high) return gym_remote::ValueError("Lower bound must be lower than higher bound.");
    }
    if (seed.kind() == Value::Kind::kInt && seed.as_int() < 0) {
      return gym_remote::ValueError("Seed must be a non-negative integer, got " + seed.Repr());
    }
    if (!seed.is_none()) rng_.Seed(seed_words::SeedWords(seed));
    for (double& x : state_) x = rng_.Uniform(low, high);
    steps_ = 0;
    already_terminated_ = false;
    *observation = Observation();
    *info = Value::Dict();
    return Status::Ok();
  }

  Status step(const Value& action, StepResult* result) override {
    std::int64_t push = 0;
    if (!action.ToInt64(&push).ok() || (push != 0 && push != 1) || action.kind() == Value::Kind::kFloat) {
      return gym_remote::AssertionError(action.Repr() + " (" + action.TypeName() + ") invalid");
    }
    auto [x, x_dot, theta, theta_dot] = state_;
    // The same operations in the same order as Gymnasium's, so that the same state steps to the same bits.
    const double force = push == 1 ? kForceMag : -kForceMag;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    const double temp = (force + kPoleMassLength * (theta_dot * theta_dot) * sintheta) / kTotalMass;
    const double thetaacc = (kGravity * sintheta - costheta * temp) /
                            (kLength * (4.0 / 3.0 - kMassPole * (costheta * costheta) / kTotalMass));
    const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
    x = x + kTau * x_dot;  // Euler integration
    x_dot = x_dot + kTau * xacc;
    theta = theta + kTau * theta_dot;
    theta_dot = theta_dot + kTau * thetaacc;
    state_ = {x, x_dot, theta, theta_dot};
    steps_ += 1;
    result->terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
    result->truncated = steps_ >= kMaxEpisodeSteps;  // TimeLimit(max_episode_steps=500)
    result->reward = already_terminated_ ? 0.0 : 1.0;  // stepping past the end earns nothing
    already_terminated_ = already_terminated_ || result->terminated;
    result->observation = Observation();
    result->info = Value::Dict();
    return Status::Ok();
  }

 private:
  static constexpr double kGravity = 9.8, kMassCart = 1.0, kMassPole = 0.1, kTotalMass = kMassPole + kMassCart;
  static constexpr double kLength = 0.5, kPoleMassLength = kMassPole * kLength, kForceMag = 10.0, kTau = 0.02;
  static constexpr double kXThreshold = 2.4, kThetaThreshold = 12 * 2 * M_PI / 360;
  static constexpr int kMaxEpisodeSteps = 500;

  Value Observation() const {
    return Value::ArrayOf(DType::kFloat32, {4}, std::vector<double>(state_.begin(), state_.end()));
  }

  Space observation_space_, action_space_;
  std::array<double, 4> state_ = {0, 0, 0, 0};
  int steps_ = 0;
  bool already_terminated_ = false;
  numpy_random::PCG64 rng_{numpy_random::EntropySeed()};
};

}  // namespace

int main(int argc, char** argv) {
  command_line::Arguments arguments;
  const int parsed = command_line::Parse(
      argc, argv, "Serve K CartPole-v1 envs (a C++ port of Gymnasium's) to the RemoteVectorEnv at ENDPOINT.",
      &arguments);
  if (parsed >= 0) return parsed;
  std::vector<std::unique_ptr<CartPole>> envs;
  std::vector<gym_remote::Env*> pointers;
  for (std::size_t i = 0; i < arguments.num_envs; ++i) {
    envs.push_back(std::make_unique<CartPole>());
    pointers.push_back(envs.back().get());
  }
  return command_line::Run(arguments, pointers);
}
