#include "gym_remote/spaces.hpp"

#include "gym_remote/codec.hpp"

namespace gym_remote {

namespace {

Status BadSpace(const std::string& reason) {
  return Status::Error(StatusCode::kProtocolError, "malformed space description: " + reason);
}

Value ConvertArray(const Value& array, DType dtype) {
  const std::size_t count = array.element_count();
  if (IsFloat(dtype)) {
    std::vector<double> numbers(count);
    for (std::size_t i = 0; i < count; ++i) numbers[i] = array.ElementAsDouble(i);
    return Value::ArrayOf(dtype, array.shape(), numbers);
  }
  std::vector<std::int64_t> numbers(count);
  for (std::size_t i = 0; i < count; ++i) numbers[i] = array.ElementAsInt64(i);
  return Value::ArrayOf(dtype, array.shape(), numbers);
}

std::string ShapeRepr(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

Status Field(const Value& description, const char* key, const Value** out) {
  *out = description.Find(key);
  if (*out == nullptr) return BadSpace(std::string("missing '") + key + "'");
  return Status::Ok();
}

Status IntField(const Value& description, const char* key, std::int64_t* out) {
  const Value* field = nullptr;
  GYM_REMOTE_RETURN_IF_ERROR(Field(description, key, &field));
  if (field->kind() != Value::Kind::kInt) return BadSpace(std::string(key) + " must be an int");
  *out = field->as_int();
  return Status::Ok();
}

Status DTypeField(const Value& description, const char* fallback, DType* dtype) {
  const Value* field = description.Find("dtype");
  std::string text = fallback != nullptr ? fallback : "";
  if (field != nullptr) {
    if (field->kind() != Value::Kind::kString) return BadSpace("dtype must be a string");
    text = field->text();
  } else if (fallback == nullptr) {
    return BadSpace("missing 'dtype'");
  }
  std::string why;
  if (!ParseDType(text, dtype, &why)) return BadSpace(why);
  return Status::Ok();
}

Status ArrayField(const Value& description, const char* key, const Value** out) {
  GYM_REMOTE_RETURN_IF_ERROR(Field(description, key, out));
  if ((*out)->kind() != Value::Kind::kArray) return BadSpace(std::string(key) + " must be an array");
  return Status::Ok();
}

Status ListField(const Value& description, const char* key, const Value** out) {
  GYM_REMOTE_RETURN_IF_ERROR(Field(description, key, out));
  if ((*out)->kind() != Value::Kind::kList) return BadSpace(std::string(key) + " must be a list");
  return Status::Ok();
}

}  // namespace

// -- construction -----------------------------------------------------------------------------------

Space Space::Box(double low, double high, Shape shape, DType dtype) {
  std::size_t count = 0;
  ShapeSize(shape, &count);
  Space space;
  space.kind_ = Kind::kBox;
  space.dtype_ = dtype;
  space.low_ = Value::ArrayOf(dtype, shape, std::vector<double>(count, low));
  space.high_ = Value::ArrayOf(dtype, shape, std::vector<double>(count, high));
  space.shape_ = std::move(shape);
  return space;
}

Space Space::Box(const std::vector<double>& low, const std::vector<double>& high, DType dtype) {
  Space space;
  space.kind_ = Kind::kBox;
  space.dtype_ = dtype;
  space.shape_ = {static_cast<std::int64_t>(low.size())};
  space.low_ = Value::ArrayOf(dtype, space.shape_, low);
  space.high_ = Value::ArrayOf(dtype, space.shape_, high);
  return space;
}

Status Space::BoxFromArrays(const Value& low, const Value& high, DType dtype, Space* out) {
  if (low.kind() != Value::Kind::kArray || high.kind() != Value::Kind::kArray) {
    return Status::Error(StatusCode::kInvalidArgument, "Box bounds must be arrays");
  }
  if (low.shape() != high.shape()) {
    return Status::Error(StatusCode::kInvalidArgument, "Box bounds must have the same shape");
  }
  Space space;
  space.kind_ = Kind::kBox;
  space.dtype_ = dtype;
  space.shape_ = low.shape();
  space.low_ = low.dtype() == dtype ? low : ConvertArray(low, dtype);
  space.high_ = high.dtype() == dtype ? high : ConvertArray(high, dtype);
  *out = std::move(space);
  return Status::Ok();
}

Space Space::Discrete(std::int64_t n, std::int64_t start, DType dtype) {
  Space space;
  space.kind_ = Kind::kDiscrete;
  space.dtype_ = dtype;
  space.n_ = n;
  space.start_ = start;
  return space;
}

Space Space::MultiDiscrete(const std::vector<std::int64_t>& nvec, std::vector<std::int64_t> start, DType dtype) {
  if (start.empty()) start.assign(nvec.size(), 0);
  Space space;
  space.kind_ = Kind::kMultiDiscrete;
  space.dtype_ = dtype;
  space.shape_ = {static_cast<std::int64_t>(nvec.size())};
  space.low_ = Value::ArrayOf(dtype, space.shape_, nvec);
  space.high_ = Value::ArrayOf(dtype, space.shape_, start);
  return space;
}

Space Space::MultiBinary(std::int64_t n) {
  Space space = MultiBinary(Shape{n});
  space.multibinary_int_ = true;
  return space;
}

Space Space::MultiBinary(Shape shape) {
  Space space;
  space.kind_ = Kind::kMultiBinary;
  space.dtype_ = DType::kInt8;
  space.shape_ = std::move(shape);
  space.multibinary_int_ = false;
  return space;
}

Space Space::Dict(Children children) {
  Space space;
  space.kind_ = Kind::kDict;
  space.children_ = std::move(children);
  return space;
}

Space Space::Tuple(std::vector<Space> spaces) {
  Space space;
  space.kind_ = Kind::kTuple;
  for (Space& child : spaces) space.children_.emplace_back(std::string(), std::move(child));
  return space;
}

// -- descriptions -----------------------------------------------------------------------------------

Value Space::Describe() const {
  Value d = Value::Dict();
  switch (kind_) {
    case Kind::kBox:
      d.Set("space", Value::String("Box"));
      d.Set("low", low_);
      d.Set("high", high_);
      d.Set("dtype", Value::String(DTypeStr(dtype_)));
      break;
    case Kind::kDiscrete:
      d.Set("space", Value::String("Discrete"));
      d.Set("n", Value::Int(n_));
      d.Set("start", Value::Int(start_));
      d.Set("dtype", Value::String(DTypeStr(dtype_)));
      break;
    case Kind::kMultiDiscrete:
      d.Set("space", Value::String("MultiDiscrete"));
      d.Set("nvec", low_);
      d.Set("start", high_);
      d.Set("dtype", Value::String(DTypeStr(dtype_)));
      break;
    case Kind::kMultiBinary: {
      d.Set("space", Value::String("MultiBinary"));
      if (multibinary_int_ && shape_.size() == 1) {
        d.Set("n", Value::Int(shape_[0]));
      } else {
        Value n = Value::List();
        for (std::int64_t dimension : shape_) n.Append(Value::Int(dimension));
        d.Set("n", std::move(n));
      }
      break;
    }
    case Kind::kDict: {
      d.Set("space", Value::String("Dict"));
      Value spaces = Value::List();
      for (const auto& child : children_) {
        spaces.Append(Value::List({Value::String(child.first), child.second.Describe()}));
      }
      d.Set("spaces", std::move(spaces));
      break;
    }
    case Kind::kTuple: {
      d.Set("space", Value::String("Tuple"));
      Value spaces = Value::List();
      for (const auto& child : children_) spaces.Append(child.second.Describe());
      d.Set("spaces", std::move(spaces));
      break;
    }
    case Kind::kOther: return other_;
  }
  return d;
}

Status Space::FromDescription(const Value& description, Space* out) { return FromDescription(description, 0, out); }

Status Space::FromDescription(const Value& description, int depth, Space* out) {
  if (description.kind() != Value::Kind::kDict) return BadSpace(description.Repr().substr(0, 60));
  if (depth > kMaxDepth) return BadSpace("nested deeper than 64 levels");
  const Value* name_field = description.Find("space");
  if (name_field == nullptr || name_field->kind() != Value::Kind::kString) return BadSpace("no 'space' name");
  const std::string& name = name_field->text();
  Space space;
  if (name == "Box") {
    const Value *low = nullptr, *high = nullptr;
    GYM_REMOTE_RETURN_IF_ERROR(ArrayField(description, "low", &low));
    GYM_REMOTE_RETURN_IF_ERROR(ArrayField(description, "high", &high));
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(DTypeField(description, nullptr, &dtype));
    Status status = BoxFromArrays(*low, *high, dtype, &space);
    if (!status.ok()) return BadSpace(status.message());
  } else if (name == "Discrete") {
    std::int64_t n = 0, start = 0;
    GYM_REMOTE_RETURN_IF_ERROR(IntField(description, "n", &n));
    GYM_REMOTE_RETURN_IF_ERROR(IntField(description, "start", &start));
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(DTypeField(description, "<i8", &dtype));
    if (n <= 0) return BadSpace("Discrete n must be positive");
    space = Discrete(n, start, dtype);
  } else if (name == "MultiDiscrete") {
    const Value *nvec = nullptr, *start = nullptr;
    GYM_REMOTE_RETURN_IF_ERROR(ArrayField(description, "nvec", &nvec));
    GYM_REMOTE_RETURN_IF_ERROR(ArrayField(description, "start", &start));
    DType dtype;
    GYM_REMOTE_RETURN_IF_ERROR(DTypeField(description, nullptr, &dtype));
    if (nvec->shape() != start->shape()) return BadSpace("MultiDiscrete nvec and start differ in shape");
    space.kind_ = Kind::kMultiDiscrete;
    space.dtype_ = dtype;
    space.shape_ = nvec->shape();
    space.low_ = nvec->dtype() == dtype ? *nvec : ConvertArray(*nvec, dtype);
    space.high_ = start->dtype() == dtype ? *start : ConvertArray(*start, dtype);
  } else if (name == "MultiBinary") {
    const Value* n = nullptr;
    GYM_REMOTE_RETURN_IF_ERROR(Field(description, "n", &n));
    if (n->kind() == Value::Kind::kInt && n->as_int() >= 0) {
      space = MultiBinary(n->as_int());
    } else if (n->kind() == Value::Kind::kList) {
      Shape shape;
      for (const Value& dimension : n->items()) {
        if (dimension.kind() != Value::Kind::kInt || dimension.as_int() < 0) return BadSpace("MultiBinary n");
        shape.push_back(dimension.as_int());
      }
      space = MultiBinary(std::move(shape));
    } else {
      return BadSpace("MultiBinary n=" + n->Repr().substr(0, 60));
    }
  } else if (name == "Dict") {
    const Value* pairs = nullptr;
    GYM_REMOTE_RETURN_IF_ERROR(ListField(description, "spaces", &pairs));
    Children children;
    for (const Value& pair : pairs->items()) {
      if (pair.kind() != Value::Kind::kList || pair.items().size() != 2 ||
          pair.items()[0].kind() != Value::Kind::kString) {
        return BadSpace("Dict spaces must be [key, space] pairs");
      }
      Space child;
      GYM_REMOTE_RETURN_IF_ERROR(FromDescription(pair.items()[1], depth + 1, &child));
      children.emplace_back(pair.items()[0].text(), std::move(child));
    }
    space = Dict(std::move(children));
  } else if (name == "Tuple") {
    const Value* list = nullptr;
    GYM_REMOTE_RETURN_IF_ERROR(ListField(description, "spaces", &list));
    std::vector<Space> spaces;
    for (const Value& item : list->items()) {
      Space child;
      GYM_REMOTE_RETURN_IF_ERROR(FromDescription(item, depth + 1, &child));
      spaces.push_back(std::move(child));
    }
    space = Tuple(std::move(spaces));
  } else if (name == "Text" || name == "Graph" || name == "Sequence" || name == "OneOf") {
    space.kind_ = Kind::kOther;
    space.other_ = description;
  } else if (name == "pickle") {
    return Status::Error(StatusCode::kProtocolError,
                         "the peer sent a pickled space, but pickle is not allowed on this connection");
  } else {
    return BadSpace("unknown space '" + name.substr(0, 40) + "'");
  }
  *out = std::move(space);
  return Status::Ok();
}

// -- layouts ----------------------------------------------------------------------------------------

bool Space::HasArrayLayout() const {
  switch (kind_) {
    case Kind::kBox:
    case Kind::kDiscrete:
    case Kind::kMultiDiscrete:
    case Kind::kMultiBinary: return true;
    case Kind::kDict:
    case Kind::kTuple:
      for (const auto& child : children_) {
        if (!child.second.HasArrayLayout()) return false;
      }
      return true;
    case Kind::kOther: return false;
  }
  return false;
}

void Space::AppendLeaves(std::vector<Leaf>* leaves) const {
  switch (kind_) {
    case Kind::kDiscrete: leaves->push_back(Leaf{dtype_, {}}); break;
    case Kind::kBox:
    case Kind::kMultiDiscrete:
    case Kind::kMultiBinary: leaves->push_back(Leaf{dtype_, shape_}); break;
    case Kind::kDict:
    case Kind::kTuple:
      for (const auto& child : children_) child.second.AppendLeaves(leaves);
      break;
    case Kind::kOther: break;
  }
}

std::vector<Leaf> Space::Leaves() const {
  std::vector<Leaf> leaves;
  if (HasArrayLayout()) AppendLeaves(&leaves);
  return leaves;
}

std::string Space::Repr() const {
  switch (kind_) {
    case Kind::kBox: {
      auto bound = [this](const Value& array) {
        bool same = true;
        for (std::size_t i = 1; i < array.element_count(); ++i) {
          same = same && array.ElementAsDouble(i) == array.ElementAsDouble(0);
        }
        if (same && array.element_count() > 0) {
          Value first = Value::Float(array.ElementAsDouble(0));
          return IsFloat(dtype_) ? first.Repr() : std::to_string(array.ElementAsInt64(0));
        }
        return array.Repr();
      };
      return "Box(" + bound(low_) + ", " + bound(high_) + ", " + ShapeRepr(shape_) + ", " + DTypeName(dtype_) + ")";
    }
    case Kind::kDiscrete:
      return "Discrete(" + std::to_string(n_) + (start_ != 0 ? ", start=" + std::to_string(start_) : "") + ")";
    case Kind::kMultiDiscrete: return "MultiDiscrete(" + low_.Repr() + ")";
    case Kind::kMultiBinary: return "MultiBinary(" + ShapeRepr(shape_) + ")";
    case Kind::kDict: {
      std::string out = "Dict(";
      for (std::size_t i = 0; i < children_.size(); ++i) {
        out += (i ? ", " : "") + Value::String(children_[i].first).Repr() + ": " + children_[i].second.Repr();
      }
      return out + ")";
    }
    case Kind::kTuple: {
      std::string out = "Tuple(";
      for (std::size_t i = 0; i < children_.size(); ++i) out += (i ? ", " : "") + children_[i].second.Repr();
      return out + ")";
    }
    case Kind::kOther: {
      const Value* name = other_.Find("space");
      return name != nullptr && name->kind() == Value::Kind::kString ? name->text() + "(...)" : "Space(...)";
    }
  }
  return "Space";
}

}  // namespace gym_remote
