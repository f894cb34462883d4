// Which knob values keep breaking the contract. A trial judged a contract
// violation or a timeout is evidence about the values it ran, as an OOM is
// about memory: the search should stop proposing a value that keeps doing
// it and try its honest neighbours instead.
//
// The model: a value is "poison" when every setting holding it breaks
// the contract (a shorter sequence, a model change, a compile that never
// finishes). A trial that ran and kept the contract clears the values it
// held (an OOM clears none: it ended before its loss was judged). A bad trial blames the values
// it held that are not cleared, in equal shares; one left alone is poison
// for certain. A bad trial whose values are all cleared blames a
// combination, which this model does not judge (the launch model does).
//
// Pure; thread-compatible.
#ifndef INFRARSI_CORE_VALUE_BLAME_H_
#define INFRARSI_CORE_VALUE_BLAME_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/optimizer.h"
#include "core/spec.h"

namespace infrarsi {

class ValueBlame {
 public:
  // `history`: the session's search and doctor trials, in any order.
  // `indices` (optional): IndexOf of each history entry (-1 outside the
  // space), when the caller has them: the trials that ran are then read by
  // digit rather than by walking their Config maps.
  ValueBlame(const SessionSpec& spec, const std::vector<Observation>& history,
             const std::vector<int64_t>* indices = nullptr);

  // How likely `config` is to break the contract again: for each bad trial,
  // the share of its suspects `config` holds, squared (holding all of them
  // repeats the bad trial; holding one of several is the test that tells
  // which it was, and is penalised little), combined over bad trials as
  // independent chances.
  double Risk(const Config& config) const;
  // A value of `config` that is poison for certain ("" when none): the
  // only uncleared value of some bad trial.
  std::string Certain(const Config& config) const;
  // Whether any trial was bad: without one, Risk is 0 everywhere.
  bool any() const { return !unexplained_.empty() || !certain_.empty(); }

  // Risk and Certain of the setting at `index` of the spec's space
  // (IndexOf): digit lookups, no Config built, for the thousands of
  // candidates a proposal scores. Precondition: 0 <= index < SpaceSize().
  double RiskAt(int64_t index) const;
  bool CertainAt(int64_t index) const;

 private:
  using Value = std::pair<std::string, std::string>;  // knob, value
  // A bad trial with two or more suspects, none of them poison for certain.
  struct Trial {
    std::vector<Value> suspects;
    std::vector<std::pair<size_t, int64_t>> held;  // those in the space: knob, value index
  };
  // 1 - prod over trials of (1 - share^2), share = held(trial) / suspects.
  template <typename Held>
  double Combined(Held held) const {
    double clean = 1;
    for (const Trial& t : unexplained_) {
      const double share = static_cast<double>(held(t)) / static_cast<double>(t.suspects.size());
      clean *= 1.0 - share * share;
    }
    return 1.0 - clean;
  }

  Space space_;
  std::set<Value> certain_;
  std::vector<std::vector<char>> certain_at_;  // [knob][value index]
  std::vector<Trial> unexplained_;
};

// The statuses that are evidence against a setting's values.
bool IsContractEvidence(const std::string& status);

}  // namespace infrarsi

#endif  // INFRARSI_CORE_VALUE_BLAME_H_
