// The envs one client hosts, stepped with Gymnasium's autoreset semantics exactly as SyncVectorEnv
// steps them (PROTOCOL.md §5): the client's share of the batch, laid out for the vector's single
// spaces, and the answers to RESET, STEP, CALL and SET_ATTR. No sockets here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gym_remote/codec.hpp"
#include "gym_remote/env.hpp"
#include "gym_remote/spaces.hpp"
#include "gym_remote/status.hpp"
#include "gym_remote/value.hpp"

namespace gym_remote {

enum class AutoresetMode { kNextStep, kSameStep, kDisabled };
bool ParseAutoresetMode(const std::string& text, AutoresetMode* mode);

constexpr std::size_t kNoEnv = static_cast<std::size_t>(-1);

// An error while handling a command: `index` names the env that raised (kNoEnv: none did, the
// command itself was wrong).
struct CommandError {
  std::size_t index = kNoEnv;
  Status status;
};

class HostedEnvs {
 public:
  explicit HostedEnvs(std::vector<Env*> envs);

  std::size_t count() const { return envs_.size(); }
  Env& env(std::size_t index) { return *envs_[index]; }
  // All envs, in order: the selection of a command without FLAG_SUBSET.
  const std::vector<std::size_t>& all() const { return all_; }

  // Lays out the buffers for the vector's single spaces (from WELCOME). `reset_first`: the envs start
  // as if their episodes had just ended (NEXT_STEP: the first STEP resets them).
  void Configure(const Space& observation_space, const Space& action_space, AutoresetMode mode, bool reset_first);

  bool action_has_layout() const { return action_space_.HasArrayLayout(); }
  const std::vector<Leaf>& action_leaves() const { return action_leaves_; }
  bool observation_has_layout() const { return observation_space_.HasArrayLayout(); }

  // Splits action leaf frames (each of `count` rows, in `dtypes`) into one action per env, as
  // gymnasium.vector.utils.iterate does: numpy scalars for shape-() leaves, arrays otherwise, rebuilt
  // into dicts and tuples.
  Status SplitActions(const std::vector<std::string_view>& frames, std::size_t count,
                      const std::vector<DType>& dtypes, std::vector<Value>* actions) const;

  // RESET of the envs `indexes` (in order) with their seeds (None or ints); `options` nullptr when the
  // field was absent. Sets `infos`, one per env reset.
  bool Reset(const std::vector<std::size_t>& indexes, const std::vector<Value>& seeds, const Value* options,
             std::vector<Value>* infos, CommandError* error);
  // STEP of the envs `indexes` with `actions` (one per env). Sets `infos` and, if an episode ended in
  // SAME_STEP mode, `finals` (one per env: None or (final_obs, final_info)). An env that fails stops the
  // step (false, `error`); with `each` (FLAG_EACH, PROTOCOL.md §5.6) the others are stepped all the same and
  // `each` gets, per env, the failure or nothing (a failed env keeps its observation and autoreset flag).
  // An env whose step() answers Status::Pending() holds the command up: with `pending` given, Step then
  // returns true with *pending = its position (else kNoEnv once all are stepped), and ResumeStep goes on
  // with that env's result when it comes; without, the pending answer is that env's error.
  bool Step(const std::vector<std::size_t>& indexes, const std::vector<Value>& actions, std::vector<Value>* infos,
            std::vector<Value>* finals, CommandError* error, std::vector<std::optional<Status>>* each = nullptr,
            std::size_t* pending = nullptr);
  bool ResumeStep(std::size_t position, Status status, StepResult result, const std::vector<std::size_t>& indexes,
                  const std::vector<Value>& actions, std::vector<Value>* infos, std::vector<Value>* finals,
                  CommandError* error, std::vector<std::optional<Status>>* each, std::size_t* pending);
  // CALL `name` (query: "" for a plain call, else the query's name).
  bool Call(const std::vector<std::size_t>& indexes, const std::string& name, const std::string& query,
            std::vector<Value>* results, CommandError* error);
  bool SetAttr(const std::vector<std::size_t>& indexes, const std::string& name, const std::vector<Value>& values,
               CommandError* error);

  // The RESULT frames for the envs `indexes`: frame 0 (header and scalars) and the observation leaf
  // frames (if the observation space has an array layout).
  void ResultFrames(std::uint64_t seq, std::uint16_t flags, const std::vector<std::size_t>& indexes,
                    std::vector<std::string>* frames) const;
  // The observations of the envs `indexes` as values (for spaces without an array layout).
  Value ObservationList(const std::vector<std::size_t>& indexes) const;

  void Close();

 private:
  Status ResetOne(std::size_t index, const Value& seed, const Value* options, Value* obs,
                  Value* info);
  bool StepFrom(std::size_t start, const std::vector<std::size_t>& indexes, const std::vector<Value>& actions,
                std::vector<Value>* infos, std::vector<Value>* finals, CommandError* error,
                std::vector<std::optional<Status>>* each, std::size_t* pending);
  bool Settle(std::size_t position, bool stepped, Status status, StepResult* result,
              const std::vector<std::size_t>& indexes, std::vector<Value>* infos, std::vector<Value>* finals,
              CommandError* error, std::vector<std::optional<Status>>* each);
  Status WriteObservation(std::size_t index, const Value& observation);
  Status WriteNode(const Space& space, const Value& value, std::size_t row, std::size_t* leaf);
  Value BuildAction(const Space& space, const std::vector<std::string_view>& frames, const std::vector<DType>& dtypes,
                    std::size_t row, std::size_t* leaf) const;
  Status Attribute(std::size_t index, const std::string& name, Value* value, bool* found);

  std::vector<Env*> envs_;
  std::vector<std::size_t> all_;
  Space observation_space_, action_space_;
  std::vector<Leaf> observation_leaves_, action_leaves_;
  AutoresetMode mode_ = AutoresetMode::kNextStep;
  std::vector<std::string> observation_buffers_;  // one per leaf: count() rows of (*shape) in its dtype
  std::vector<Value> env_obs_;
  std::vector<double> rewards_;
  std::vector<bool> terminated_, truncated_, autoreset_;
  std::vector<Value> last_seed_;  // None before any seeded reset
  std::vector<std::map<std::string, Value>> attributes_;  // set by SET_ATTR
};

}  // namespace gym_remote
