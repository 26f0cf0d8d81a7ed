#include "hosted_envs.hpp"

#include <cstring>
#include <limits>

#include "gym_remote/protocol.hpp"

namespace gym_remote {

namespace {

// Writes element `i` of a numpy value (array or scalar) into `out` in `dtype`, as a C cast converts.
void StoreElement(DType dtype, const Value& source, std::size_t i, char* out) {
  if (IsFloat(dtype)) {
    const double number = source.ElementAsDouble(i);
    if (dtype == DType::kFloat32) {
      const float narrow = static_cast<float>(number);
      std::memcpy(out, &narrow, sizeof(narrow));
    } else {
      std::memcpy(out, &number, sizeof(number));
    }
    return;
  }
  std::int64_t number = source.ElementAsInt64(i);
  if (dtype == DType::kBool) number = IsFloat(source.dtype()) ? source.ElementAsDouble(i) != 0.0 : number != 0;
  std::memcpy(out, &number, ItemSize(dtype));  // little-endian: the low bytes wrap as numpy's casts do
}

// `value` (a number, numpy scalar or array, or nested lists of numbers) as a numpy value.
Status AsNumpy(const Value& value, Value* numpy) {
  switch (value.kind()) {
    case Value::Kind::kArray:
    case Value::Kind::kScalar: *numpy = value; return Status::Ok();
    case Value::Kind::kBool: *numpy = Value::ScalarBool(value.as_bool()); return Status::Ok();
    case Value::Kind::kInt: *numpy = Value::ScalarInt(DType::kInt64, value.as_int()); return Status::Ok();
    case Value::Kind::kFloat: *numpy = Value::ScalarFloat(DType::kFloat64, value.as_float()); return Status::Ok();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      std::vector<double> numbers;
      GYM_REMOTE_RETURN_IF_ERROR(value.ToDoubles(&numbers));
      *numpy = Value::ArrayOf(DType::kFloat64, {static_cast<std::int64_t>(numbers.size())}, numbers);
      return Status::Ok();
    }
    default: return TypeError("a " + value.TypeName() + " is not a number or an array");
  }
}

std::string ShapeText(const Shape& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

bool ParseAutoresetMode(const std::string& text, AutoresetMode* mode) {
  if (text == "NextStep") *mode = AutoresetMode::kNextStep;
  else if (text == "SameStep") *mode = AutoresetMode::kSameStep;
  else if (text == "Disabled") *mode = AutoresetMode::kDisabled;
  else return false;
  return true;
}

HostedEnvs::HostedEnvs(std::vector<Env*> envs) : envs_(std::move(envs)) {
  const std::size_t k = envs_.size();
  for (std::size_t i = 0; i < k; ++i) all_.push_back(i);
  env_obs_.resize(k);
  rewards_.assign(k, 0.0);
  terminated_.assign(k, false);
  truncated_.assign(k, false);
  autoreset_.assign(k, false);
  last_seed_.resize(k);
  attributes_.resize(k);
}

void HostedEnvs::Configure(const Space& observation_space, const Space& action_space, AutoresetMode mode,
                           bool reset_first) {
  observation_space_ = observation_space;
  action_space_ = action_space;
  observation_leaves_ = observation_space.Leaves();
  action_leaves_ = action_space.Leaves();
  mode_ = mode;
  observation_buffers_.clear();
  for (const Leaf& leaf : observation_leaves_) {
    std::size_t size = 0;
    ShapeSize(leaf.shape, &size);
    observation_buffers_.emplace_back(count() * size * ItemSize(leaf.dtype), '\0');
  }
  autoreset_.assign(count(), reset_first);
}

// -- actions ----------------------------------------------------------------------------------------

Status HostedEnvs::SplitActions(const std::vector<std::string_view>& frames, std::size_t count,
                                const std::vector<DType>& dtypes, std::vector<Value>* actions) const {
  actions->clear();
  for (std::size_t row = 0; row < count; ++row) {
    std::size_t leaf = 0;
    actions->push_back(BuildAction(action_space_, frames, dtypes, row, &leaf));
  }
  return Status::Ok();
}

Value HostedEnvs::BuildAction(const Space& space, const std::vector<std::string_view>& frames,
                              const std::vector<DType>& dtypes, std::size_t row, std::size_t* leaf) const {
  switch (space.kind()) {
    case Space::Kind::kDict: {
      Value action = Value::Dict();
      for (const auto& child : space.children()) action.Set(child.first, BuildAction(child.second, frames, dtypes, row, leaf));
      return action;
    }
    case Space::Kind::kTuple: {
      Value action = Value::Tuple();
      for (const auto& child : space.children()) action.Append(BuildAction(child.second, frames, dtypes, row, leaf));
      return action;
    }
    default: {
      const std::size_t position = (*leaf)++;
      const Leaf& layout = action_leaves_[position];
      const DType dtype = dtypes[position];
      std::size_t size = 0;
      ShapeSize(layout.shape, &size);
      const std::size_t row_bytes = size * ItemSize(dtype);
      const std::string_view bytes = frames[position].substr(row * row_bytes, row_bytes);
      Value action;
      if (layout.shape.empty()) {
        Value::ScalarFromBytes(dtype, bytes, &action);  // sizes were checked by the caller
      } else {
        Value::Array(dtype, layout.shape, std::string(bytes), &action);
      }
      return action;
    }
  }
}

// -- observations -----------------------------------------------------------------------------------

Status HostedEnvs::WriteObservation(std::size_t index, const Value& observation) {
  if (observation_leaves_.empty() && !observation_space_.HasArrayLayout()) return Status::Ok();
  std::size_t leaf = 0;
  Status status = WriteNode(observation_space_, observation, index, &leaf);
  if (!status.ok()) {
    return ValueError("the observation does not fit the observation space " + observation_space_.Repr() + ": " +
                      status.message());
  }
  return Status::Ok();
}

Status HostedEnvs::WriteNode(const Space& space, const Value& value, std::size_t row, std::size_t* leaf) {
  switch (space.kind()) {
    case Space::Kind::kDict:
      for (const auto& child : space.children()) {
        const Value* item = value.Find(child.first);
        if (item == nullptr) return Status::EnvError("KeyError", "no key '" + child.first + "' in " + value.TypeName());
        GYM_REMOTE_RETURN_IF_ERROR(WriteNode(child.second, *item, row, leaf));
      }
      return Status::Ok();
    case Space::Kind::kTuple: {
      if ((value.kind() != Value::Kind::kTuple && value.kind() != Value::Kind::kList) ||
          value.items().size() != space.children().size()) {
        return ValueError("expected a tuple of " + std::to_string(space.children().size()) + ", got " +
                          value.Repr().substr(0, 80));
      }
      for (std::size_t i = 0; i < space.children().size(); ++i) {
        GYM_REMOTE_RETURN_IF_ERROR(WriteNode(space.children()[i].second, value.items()[i], row, leaf));
      }
      return Status::Ok();
    }
    default: {
      const std::size_t position = (*leaf)++;
      const Leaf& layout = observation_leaves_[position];
      Value numpy;
      GYM_REMOTE_RETURN_IF_ERROR(AsNumpy(value, &numpy));
      std::size_t size = 0;
      ShapeSize(layout.shape, &size);
      const bool shape_ok = numpy.kind() == Value::Kind::kScalar ? layout.shape.empty()
                            : value.kind() == Value::Kind::kArray ? numpy.shape() == layout.shape
                                                                  : numpy.element_count() == size;
      if (!shape_ok || numpy.element_count() != size) {
        return ValueError("a leaf of shape " + ShapeText(layout.shape) + " got " + value.Repr().substr(0, 80));
      }
      const std::size_t itemsize = ItemSize(layout.dtype);
      char* out = &observation_buffers_[position][row * size * itemsize];
      if (numpy.dtype() == layout.dtype) {
        std::memcpy(out, numpy.data().data(), size * itemsize);
      } else {
        for (std::size_t i = 0; i < size; ++i) StoreElement(layout.dtype, numpy, i, out + i * itemsize);
      }
      return Status::Ok();
    }
  }
}

void HostedEnvs::ResultFrames(std::uint64_t seq, std::uint16_t flags, const std::vector<std::size_t>& indexes,
                              std::vector<std::string>* frames) const {
  std::vector<double> rewards;
  std::vector<bool> terminated, truncated;
  for (std::size_t index : indexes) {
    rewards.push_back(rewards_[index]);
    terminated.push_back(terminated_[index]);
    truncated.push_back(truncated_[index]);
  }
  frames->push_back(PackResultFrame(seq, flags, rewards, terminated, truncated));
  const bool everyone = indexes == all_;
  for (std::size_t position = 0; position < observation_leaves_.size(); ++position) {
    const std::string& buffer = observation_buffers_[position];
    if (everyone) {
      frames->push_back(buffer);
      continue;
    }
    const std::size_t row_bytes = buffer.size() / count();
    std::string rows;
    rows.reserve(row_bytes * indexes.size());
    for (std::size_t index : indexes) rows.append(buffer, index * row_bytes, row_bytes);
    frames->push_back(std::move(rows));
  }
}

Value HostedEnvs::ObservationList(const std::vector<std::size_t>& indexes) const {
  Value list = Value::List();
  for (std::size_t index : indexes) list.Append(env_obs_[index]);
  return list;
}

// -- commands ---------------------------------------------------------------------------------------

Status HostedEnvs::ResetOne(std::size_t index, const Value& seed, const Value* options,
                            Value* obs, Value* info) {
  *obs = Value();
  *info = Value::Dict();
  GYM_REMOTE_RETURN_IF_ERROR(envs_[index]->reset_any_seed(seed, options, obs, info));
  if (!info->is_dict()) return TypeError("reset() returned an info that is not a dict: " + info->TypeName());
  return Status::Ok();
}

bool HostedEnvs::Reset(const std::vector<std::size_t>& indexes, const std::vector<Value>& seeds, const Value* options,
                       std::vector<Value>* infos, CommandError* error) {
  infos->clear();
  for (std::size_t position = 0; position < indexes.size(); ++position) {
    const std::size_t index = indexes[position];
    const Value& seed_value = seeds[position];
    Value seed = seed_value.kind() == Value::Kind::kBool ? Value::Int(seed_value.as_bool() ? 1 : 0) : seed_value;
    Status status;
    if ((seed.kind() == Value::Kind::kInt && seed.as_int() < 0) ||
        (seed.kind() == Value::Kind::kBigInt && !seed.text().empty() && seed.text()[0] == '-')) {
      // what Gymnasium's Env.reset raises (gymnasium.utils.seeding.np_random)
      status = Status::EnvError("Error", "Seed must be greater or equal to zero, actual value: " + seed.Repr(),
                                "gymnasium.error");
    } else if (!seed.is_none() && !seed.is_int()) {
      status = Status::EnvError("Error", "Seed must be a python integer, actual type: <class '" +
                                             seed_value.TypeName() + "'>", "gymnasium.error");
    }
    // Gymnasium's Env.reset records the seed first (super().reset(seed=seed)), even if the env then raises.
    if (status.ok() && !seed.is_none()) last_seed_[index] = seed;
    Value obs, info;
    if (status.ok()) status = ResetOne(index, seed, options, &obs, &info);
    if (status.ok()) status = WriteObservation(index, obs);
    if (!status.ok()) {
      *error = CommandError{index, status};
      return false;
    }
    env_obs_[index] = std::move(obs);
    autoreset_[index] = false;
    rewards_[index] = 0.0;
    terminated_[index] = false;
    truncated_[index] = false;
    infos->push_back(std::move(info));
  }
  return true;
}

bool HostedEnvs::Step(const std::vector<std::size_t>& indexes, const std::vector<Value>& actions,
                      std::vector<Value>* infos, std::vector<Value>* finals, CommandError* error,
                      std::vector<std::optional<Status>>* each, std::size_t* pending) {
  infos->clear();
  finals->clear();
  if (each != nullptr) each->assign(indexes.size(), std::nullopt);
  return StepFrom(0, indexes, actions, infos, finals, error, each, pending);
}

bool HostedEnvs::ResumeStep(std::size_t position, Status status, StepResult result,
                            const std::vector<std::size_t>& indexes, const std::vector<Value>& actions,
                            std::vector<Value>* infos, std::vector<Value>* finals, CommandError* error,
                            std::vector<std::optional<Status>>* each, std::size_t* pending) {
  if (!Settle(position, true, std::move(status), &result, indexes, infos, finals, error, each)) return false;
  return StepFrom(position + 1, indexes, actions, infos, finals, error, each, pending);
}

bool HostedEnvs::StepFrom(std::size_t start, const std::vector<std::size_t>& indexes,
                          const std::vector<Value>& actions, std::vector<Value>* infos, std::vector<Value>* finals,
                          CommandError* error, std::vector<std::optional<Status>>* each, std::size_t* pending) {
  for (std::size_t position = start; position < indexes.size(); ++position) {
    const std::size_t index = indexes[position];
    StepResult result;
    Status status;
    const bool resets = mode_ == AutoresetMode::kNextStep && autoreset_[index];
    if (resets) {
      status = ResetOne(index, Value(), nullptr, &result.observation, &result.info);
    } else {
      status = envs_[index]->step(actions[position], &result);
      if (status.code() == StatusCode::kPending) {
        if (pending != nullptr) {
          *pending = position;
          return true;
        }
        status = Status::EnvError("RuntimeError", "step() answered 'pending', which only a pumped client can wait for");
      }
    }
    if (!Settle(position, !resets, std::move(status), &result, indexes, infos, finals, error, each)) return false;
  }
  if (pending != nullptr) *pending = kNoEnv;
  return true;
}

// The rest of one env's share of a STEP once its step() (`stepped`) or its autoreset answered.
bool HostedEnvs::Settle(std::size_t position, bool stepped, Status status, StepResult* result,
                        const std::vector<std::size_t>& indexes, std::vector<Value>* infos, std::vector<Value>* finals,
                        CommandError* error, std::vector<std::optional<Status>>* each) {
  const std::size_t index = indexes[position];
  if (stepped) {
    if (status.ok() && !result->info.is_dict()) {
      status = TypeError("step() returned an info that is not a dict: " + result->info.TypeName());
    }
    if (status.ok() && mode_ == AutoresetMode::kSameStep && (result->terminated || result->truncated)) {
      Value obs, info;
      status = ResetOne(index, Value(), nullptr, &obs, &info);
      if (status.ok()) {
        if (finals->empty()) finals->assign(indexes.size(), Value());
        (*finals)[position] = Value::Tuple({std::move(result->observation), std::move(result->info)});
        result->observation = std::move(obs);
        result->info = std::move(info);
      }
    }
  }
  if (status.ok()) status = WriteObservation(index, result->observation);
  if (!status.ok() && each != nullptr) {
    (*each)[position] = status;
    (void)WriteObservation(index, env_obs_[index]);  // its rows hold its last observation again
    rewards_[index] = 0.0;
    terminated_[index] = truncated_[index] = false;
    infos->push_back(Value::Dict());
    return true;
  }
  if (!status.ok()) {
    *error = CommandError{index, status};
    return false;
  }
  env_obs_[index] = std::move(result->observation);
  autoreset_[index] = result->terminated || result->truncated;
  rewards_[index] = result->reward;
  terminated_[index] = result->terminated;
  truncated_[index] = result->truncated;
  infos->push_back(std::move(result->info));
  return true;
}

Status HostedEnvs::Attribute(std::size_t index, const std::string& name, Value* value, bool* found) {
  *found = true;
  const auto stored = attributes_[index].find(name);
  if (stored != attributes_[index].end()) {
    *value = stored->second;
    return Status::Ok();
  }
  Env& env = *envs_[index];
  if (env.get_attr(name, value)) return Status::Ok();
  if (name == "render") return env.render(value);
  if (name == "np_random_seed") {
    *value = last_seed_[index].is_none() ? Value::Int(-1) : last_seed_[index];
    return Status::Ok();
  }
  if (name == "metadata") {
    *value = env.metadata();
    return Status::Ok();
  }
  if (name == "render_mode") {
    const std::optional<std::string> mode = env.render_mode();
    *value = mode ? Value::String(*mode) : Value();
    return Status::Ok();
  }
  if (name == "spec") {
    *value = Value();
    return Status::Ok();
  }
  *found = false;
  return Status::Ok();
}

bool HostedEnvs::Call(const std::vector<std::size_t>& indexes, const std::string& name, const std::string& query,
                      std::vector<Value>* results, CommandError* error) {
  results->clear();
  for (std::size_t index : indexes) {
    Value value;
    bool found = false;
    Status status;
    if (!query.empty()) {  // "has_attr": reads, never calls
      const auto stored = attributes_[index].find(name);
      Value ignored;
      found = stored != attributes_[index].end() || envs_[index]->get_attr(name, &ignored) || name == "render" ||
              name == "np_random_seed" || name == "metadata" || name == "render_mode" || name == "spec";
      value = Value::Bool(found);
    } else if (name == "gym_remote:wrappers") {
      value = Value::List();  // no Python wrappers around a C++ env
    } else {
      status = Attribute(index, name, &value, &found);
      if (status.ok() && !found) {
        status = AttributeError("'" + envs_[index]->class_name() + "' object has no attribute '" + name + "'");
      }
    }
    if (!status.ok()) {
      *error = CommandError{index, status};
      return false;
    }
    results->push_back(std::move(value));
  }
  return true;
}

bool HostedEnvs::SetAttr(const std::vector<std::size_t>& indexes, const std::string& name,
                         const std::vector<Value>& values, CommandError* error) {
  (void)error;
  for (std::size_t position = 0; position < indexes.size(); ++position) {
    const std::size_t index = indexes[position];
    if (!envs_[index]->set_attr(name, values[position])) attributes_[index][name] = values[position];
  }
  return true;
}

void HostedEnvs::Close() {
  for (Env* env : envs_) env->close();
}

}  // namespace gym_remote
