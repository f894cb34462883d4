// Derived values: a value the command needs that follows from the knobs,
// stated once in the spec so the search never breaks the tie. The common
// case is gradient accumulation, which must keep the global batch fixed as
// the micro-batch changes:
//
//   knobs: {micro_batch: [1, 2, 4, 8]}
//   derived: {accum: "32 / (micro_batch * 2)"}
//   executor: {process: {command: "... --mbs {micro_batch} --accum {accum}"}}
//
// An expression is integers, knob names whose values are integers, + - * /
// and parentheses. Division must be exact, and every value a positive
// integer, for every setting of the knobs it names: checked at Init, so no
// trial is ever proposed that the command could not express.
//
// Pure; thread-compatible.
#ifndef INFRARSI_CORE_DERIVED_H_
#define INFRARSI_CORE_DERIVED_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace infrarsi {

class DerivedExpr {
 public:
  // INVALID_ARGUMENT saying where the text stops making sense.
  static absl::StatusOr<DerivedExpr> Parse(const std::string& text);
  // The knob names it reads.
  const std::set<std::string>& names() const { return names_; }
  const std::string& text() const { return text_; }
  // Its value at `values` (name -> the knob's value as written).
  // INVALID_ARGUMENT when a name is missing or not an integer, a division
  // is not exact or by zero, or a result leaves [-2^40, 2^40].
  absl::StatusOr<int64_t> Eval(const std::map<std::string, std::string>& values) const;

  struct Node;  // the parse tree (derived.cc)

 private:
  std::string text_;
  std::set<std::string> names_;
  std::shared_ptr<const Node> root_;
};

}  // namespace infrarsi

#endif  // INFRARSI_CORE_DERIVED_H_
