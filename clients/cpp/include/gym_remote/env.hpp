// What a simulator implements to be served by a gym_remote client: a Gymnasium env, in C++.
//
// The client calls these methods from the thread that runs Client::Run(), one at a time. An env
// "raises" by returning an error Status, preferably one naming a Python exception class
// (gym_remote::ValueError("..."), Status::EnvError("MyError", "...", "my_module")): the learner then
// gets a RemoteEnvError naming the slot, also of that class when it is a built-in one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gym_remote/spaces.hpp"
#include "gym_remote/status.hpp"
#include "gym_remote/value.hpp"

namespace gym_remote {

// What env.step() returns (Gymnasium's 5-tuple).
struct StepResult {
  Value observation;
  double reward = 0.0;
  bool terminated = false;
  bool truncated = false;
  Value info = Value::Dict();  // a dict (kDict, or kPairDict)
};

class Env {
 public:
  virtual ~Env() = default;

  // The spaces must not change while the client runs. Observations must be samples of
  // observation_space (as Values: arrays of its dtypes, numpy scalars, dicts and tuples of them);
  // actions arrive as Values too (see Client: numpy arrays and scalars of the action leaves' dtypes,
  // or whatever value the learner sent when its actions were not numpy arrays).
  virtual const Space& observation_space() const = 0;
  virtual const Space& action_space() const = 0;

  // env.reset(seed=seed, options=options). `seed` is absent for reset(seed=None). `options` is
  // nullptr when the learner left the keyword out (reset(seed=...) only), else the value (possibly
  // None). Sets `observation` and `info` (a dict).
  virtual Status reset(const std::optional<std::int64_t>& seed, const Value* options, Value* observation,
                       Value* info) = 0;

  // reset() with the seed as the learner sent it: None or a non-negative int of any size (kInt, or
  // kBigInt beyond the signed 64-bit range). The default hands reset() the seeds of the signed 64-bit
  // range and refuses larger ones; an env that takes any seed overrides it (the C API's envs do).
  virtual Status reset_any_seed(const Value& seed, const Value* options, Value* observation, Value* info) {
    if (seed.kind() == Value::Kind::kBigInt) {
      return Status::EnvError("Error", "this C++ env takes seeds in the signed 64-bit range, got " + seed.Repr(),
                              "gymnasium.error");
    }
    std::optional<std::int64_t> number;
    if (seed.kind() == Value::Kind::kInt) number = seed.as_int();
    return reset(number, options, observation, info);
  }

  // env.step(action).
  virtual Status step(const Value& action, StepResult* result) = 0;

  // env.render(): a frame, or None (the default) for an env without rendering.
  virtual Status render(Value* frame) {
    *frame = Value();
    return Status::Ok();
  }

  // env.metadata (a dict; entries travel in HELLO) and env.render_mode.
  virtual Value metadata() const { return Value::Dict(); }
  virtual std::optional<std::string> render_mode() const { return std::nullopt; }

  // Attributes of the env for the learner's get_attr / call / set_attr, beyond those the client
  // answers itself (render, np_random_seed, metadata, render_mode, spec, and any attribute set by
  // set_attr). get_attr: true with `value` set if the env has `name`. set_attr: true if the env took
  // the value itself; false lets the client store it (a later get_attr returns it).
  virtual bool get_attr(const std::string& name, Value* value) {
    (void)name;
    (void)value;
    return false;
  }
  virtual bool set_attr(const std::string& name, const Value& value) {
    (void)name;
    (void)value;
    return false;
  }

  // The env's class name, for error messages ("'ProbeEnv' object has no attribute 'foo'").
  virtual std::string class_name() const { return "Env"; }

  // Called once, when the client ends.
  virtual void close() {}
};

}  // namespace gym_remote
