// Gymnasium spaces as the protocol describes them (PROTOCOL.md §7.2) and their array layouts (§5.1).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gym_remote/dtype.hpp"
#include "gym_remote/status.hpp"
#include "gym_remote/value.hpp"

namespace gym_remote {

// One array of a space's array layout: a batch of k samples is an array of shape (k, *shape).
struct Leaf {
  DType dtype = DType::kFloat64;
  Shape shape;
};

class Space {
 public:
  enum class Kind { kBox, kDiscrete, kMultiDiscrete, kMultiBinary, kDict, kTuple, kOther };
  using Children = std::vector<std::pair<std::string, Space>>;  // Dict: keys in order; Tuple: keys empty

  Space() = default;  // an empty Tuple

  // Box(low, high, shape, dtype): every element has the same bounds (gymnasium.spaces.Box with scalar
  // bounds). Infinite bounds are allowed for float dtypes.
  static Space Box(double low, double high, Shape shape, DType dtype = DType::kFloat32);
  // A 1-D Box with bounds per element (converted to `dtype`).
  static Space Box(const std::vector<double>& low, const std::vector<double>& high, DType dtype = DType::kFloat32);
  // A Box from arrays `low` and `high` of the same shape (converted to `dtype` if theirs differs).
  static Status BoxFromArrays(const Value& low, const Value& high, DType dtype, Space* out);
  static Space Discrete(std::int64_t n, std::int64_t start = 0, DType dtype = DType::kInt64);
  static Space MultiDiscrete(const std::vector<std::int64_t>& nvec, std::vector<std::int64_t> start = {},
                             DType dtype = DType::kInt64);
  static Space MultiBinary(std::int64_t n);
  static Space MultiBinary(Shape shape);
  static Space Dict(Children children);
  static Space Tuple(std::vector<Space> spaces);

  Kind kind() const { return kind_; }
  DType dtype() const { return dtype_; }           // Box, Discrete, MultiDiscrete (MultiBinary: int8)
  const Shape& shape() const { return shape_; }    // the shape of one sample (leaves)
  std::int64_t n() const { return n_; }            // Discrete
  std::int64_t start() const { return start_; }    // Discrete
  const Value& low() const { return low_; }        // Box (array); MultiDiscrete: nvec
  const Value& high() const { return high_; }      // Box (array); MultiDiscrete: start
  const Children& children() const { return children_; }  // Dict, Tuple
  const Value& other() const { return other_; }    // kOther (Text, Graph, Sequence, OneOf): its description

  // The description of PROTOCOL.md §7.2, exactly as gym_remote.codec.space_to_value writes it for
  // the same Gymnasium space (without "rng": this client's spaces have no random generator).
  Value Describe() const;
  // A space from a description (WELCOME's). Text, Graph, Sequence and OneOf are kept as kOther (no
  // array layout); "rng" is ignored; pickled spaces are refused.
  static Status FromDescription(const Value& description, Space* out);

  bool HasArrayLayout() const;
  // The leaves in wire order (Dict in its key order, Tuple in order); empty without an array layout.
  std::vector<Leaf> Leaves() const;

  // Equal descriptions.
  bool operator==(const Space& other) const { return Describe() == other.Describe(); }
  bool operator!=(const Space& other) const { return !(*this == other); }
  // Gymnasium's repr, roughly: "Box(-1.0, 1.0, (2,), float32)", "Discrete(3, start=-1)", ...
  std::string Repr() const;

 private:
  static Status FromDescription(const Value& description, int depth, Space* out);
  void AppendLeaves(std::vector<Leaf>* leaves) const;

  Kind kind_ = Kind::kTuple;
  DType dtype_ = DType::kInt64;
  Shape shape_;
  std::int64_t n_ = 0;
  std::int64_t start_ = 0;
  bool multibinary_int_ = true;  // MultiBinary(n) rather than MultiBinary([n, ...])
  Value low_, high_;
  Children children_;
  Value other_;
};

}  // namespace gym_remote
