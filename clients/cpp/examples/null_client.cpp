// gym_remote_null_client: an env that costs nothing (benchmarks/bench_envs.py's NullEnv), for measuring
// what the transport and the client cost: CartPole's spaces, zeros for observations, reward 1, never ends.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "command_line.hpp"
#include "gym_remote/env.hpp"

namespace {

using gym_remote::DType;
using gym_remote::Space;
using gym_remote::Status;
using gym_remote::Value;

class NullEnv : public gym_remote::Env {
 public:
  NullEnv() {
    const double inf = std::numeric_limits<double>::infinity();
    observation_space_ = Space::Box({-inf, -inf, -inf, -inf}, {inf, inf, inf, inf}, DType::kFloat32);
    action_space_ = Space::Discrete(2);
  }

  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  std::string class_name() const override { return "NullEnv"; }

  Status reset(const std::optional<std::int64_t>&, const Value*, Value* observation, Value* info) override {
    *observation = zeros_;
    *info = Value::Dict();
    return Status::Ok();
  }

  Status step(const Value&, gym_remote::StepResult* result) override {
    result->observation = zeros_;
    result->reward = 1.0;
    result->info = Value::Dict();
    return Status::Ok();
  }

 private:
  Space observation_space_, action_space_;
  Value zeros_ = Value::ArrayOf(DType::kFloat32, {4}, std::vector<double>(4, 0.0));
};

}  // namespace

int main(int argc, char** argv) {
  command_line::Arguments arguments;
  const int parsed = command_line::Parse(
      argc, argv, "Serve K zero-cost envs (CartPole's spaces) to the RemoteVectorEnv at ENDPOINT.", &arguments);
  if (parsed >= 0) return parsed;
  std::vector<std::unique_ptr<NullEnv>> envs;
  std::vector<gym_remote::Env*> pointers;
  for (std::size_t i = 0; i < arguments.num_envs; ++i) {
    envs.push_back(std::make_unique<NullEnv>());
    pointers.push_back(envs.back().get());
  }
  return command_line::Run(arguments, pointers);
}
