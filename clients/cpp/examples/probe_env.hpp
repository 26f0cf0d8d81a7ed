// The conformance probe env, gym_remote/Probe-v0, bit for bit as docs/CONFORMANCE.md §1 defines it
// (and gym_remote/probe.py implements it): integer dynamics on the seed, exact float32 arithmetic,
// and infos that use every encoding a client must get right.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gym_remote/env.hpp"

namespace probe {

class ProbeEnv : public gym_remote::Env {
 public:
  // render_mode: none, or "ansi" (render() then returns "t=<t> base=<base>").
  explicit ProbeEnv(std::optional<std::string> render_mode = std::nullopt);

  static gym_remote::Space ObservationSpace();
  static gym_remote::Space ActionSpace();

  const gym_remote::Space& observation_space() const override { return observation_space_; }
  const gym_remote::Space& action_space() const override { return action_space_; }
  // reset(seed=...) with a seed of the signed 64-bit range: reset_any_seed does the work.
  gym_remote::Status reset(const std::optional<std::int64_t>& seed, const gym_remote::Value* options,
                           gym_remote::Value* observation, gym_remote::Value* info) override;
  // reset(seed=...) with a seed of any size (CONFORMANCE.md §1.3: seeds have no upper bound).
  gym_remote::Status reset_any_seed(const gym_remote::Value& seed, const gym_remote::Value* options,
                                    gym_remote::Value* observation, gym_remote::Value* info) override;
  gym_remote::Status step(const gym_remote::Value& action, gym_remote::StepResult* result) override;
  gym_remote::Status render(gym_remote::Value* frame) override;
  gym_remote::Value metadata() const override;
  std::optional<std::string> render_mode() const override { return render_mode_; }
  std::string class_name() const override { return "ProbeEnv"; }

 private:
  gym_remote::Value Observation() const;

  std::optional<std::string> render_mode_;
  gym_remote::Space observation_space_, action_space_;
  std::int64_t draw_ = 0;  // the seed stream: the last base drawn, before the offset
  std::int64_t base_ = 0;
  std::int64_t level_ = 0;
  std::int64_t t_ = 0;
  std::int64_t term_step_ = 0;
  float zeta_[2] = {0.0f, 0.0f};
  std::int8_t bits_[2] = {0, 0};
};

}  // namespace probe
