#pragma once
// The greedy checkpoint solver's index of its best variable (internal to the checkpoint part).
#include <algorithm>
#include <vector>

namespace infinipipe {

// The variable of highest priority, the lowest index among equals (what a scan from the front
// keeping strict improvements finds), kept in a tournament tree: the greedy picks thousands of
// times among tens of thousands of variables (one per stage and chunk, untied), and a pick
// changes the priorities of few of them, so a scan per pick was most of a solve. Changes are
// marked and the paths above them replayed once, level by level, when the best is asked for: a
// pick changes the priorities of every variable in the rows it nearly satisfies, neighbouring
// diagonals whose paths soon meet, and walking each path on its own was most of the solver's
// time on long sequences' steps. Every node is then the better of its children again, as after
// one update per change, so the best is the same.
// `priority` is read, not copied: a caller changes it, then calls update(j) for each j changed.
class Tournament {
 public:
  explicit Tournament(const std::vector<double>& priority) : priority_(priority) {
    const int n = static_cast<int>(priority.size());
    while (size_ < n) size_ *= 2;
    winner_.assign(2 * static_cast<size_t>(size_), -1);
    changed_.assign(n, 0);
    for (int j = 0; j < n; ++j) winner_[size_ + j] = j;
    for (int node = size_ - 1; node >= 1; --node) winner_[node] = better(2 * node, 2 * node + 1);
  }
  int best() {
    replay();
    return winner_[1];
  }
  // After priority[j] changed.
  void update(int j) {
    if (changed_[j]) return;
    changed_[j] = 1;
    marked_.push_back(j);
  }

 private:
  int better(int left, int right) const {
    const int a = winner_[left], b = winner_[right];
    if (a < 0) return b;
    if (b < 0) return a;
    return priority_[b] > priority_[a] ? b : a;  // a < b: ties keep the lower index
  }
  // Replays the nodes above the marked leaves, lowest level first. A node whose winner is the
  // same variable as before, with its priority unchanged, changes nothing above it.
  void replay() {
    if (marked_.empty()) return;
    level_.clear();
    for (int j : marked_) level_.push_back((size_ + j) / 2);
    std::sort(level_.begin(), level_.end());
    while (!level_.empty()) {
      next_.clear();
      int last = -1;
      for (int node : level_) {
        if (node == last) continue;
        last = node;
        const int before = winner_[node];
        winner_[node] = better(2 * node, 2 * node + 1);
        const bool moved = winner_[node] != before || (before >= 0 && changed_[before]);
        if (moved && node > 1) next_.push_back(node / 2);  // sorted, as the level is
      }
      level_.swap(next_);
    }
    for (int j : marked_) changed_[j] = 0;
    marked_.clear();
  }
  const std::vector<double>& priority_;
  int size_ = 1;
  std::vector<int> winner_;
  std::vector<char> changed_;      // per variable: marked since the last replay
  std::vector<int> marked_;        // those variables
  std::vector<int> level_, next_;  // nodes to replay, one level at a time
};

}  // namespace infinipipe
