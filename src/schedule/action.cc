#include "infinipipe/schedule/action.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <nlohmann/json.hpp>

#include "infinipipe/core/error.h"

namespace infinipipe {

namespace {

struct TypeName {
  ActionType type;
  const char* prefix;
};
// Longest prefixes first, so that "F" does not claim what is not a plain forward.
constexpr TypeName kTypeNames[] = {
    {ActionType::kSendHeadGrad, "SEND_HG"},
    {ActionType::kRecvHeadGrad, "RECV_HG"},
    {ActionType::kSendHead, "SEND_H"},
    {ActionType::kRecvHead, "RECV_H"},
    {ActionType::kSendForward, "SEND_F"},
    {ActionType::kRecvForward, "RECV_F"},
    {ActionType::kSendBackward, "SEND_B"},
    {ActionType::kRecvBackward, "RECV_B"},
    {ActionType::kForward, "F"},
    {ActionType::kBackward, "B"},
    {ActionType::kHead, "H"},
    {ActionType::kWeight, "W"},
};

const char* prefix_of(ActionType type) {
  for (const TypeName& t : kTypeNames)
    if (t.type == type) return t.prefix;
  return "?";
}

const char* const kForms =
    "F<k>, B<k>, W<k>, SEND_F<k>, RECV_F<k>, SEND_B<k>, RECV_B<k>, H<k>, or SEND_H<k>@<s>, "
    "RECV_H<k>@<s>, SEND_HG<k>@<s>, RECV_HG<k>@<s>; k a chunk id >= 0, s a stage >= 0";

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

int Action::peer(int stage) const {
  switch (type) {
    case ActionType::kSendForward:
    case ActionType::kRecvBackward:
      return stage + 1;
    case ActionType::kRecvForward:
    case ActionType::kSendBackward:
      return stage - 1;
    case ActionType::kSendHead:
    case ActionType::kRecvHead:
    case ActionType::kSendHeadGrad:
    case ActionType::kRecvHeadGrad:
      return peer_stage;
    default:
      break;
  }
  throw Error("peer() asked of the compute action " + text() + ": only SEND and RECV have a peer");
}

std::string Action::text() const {
  std::string out = prefix_of(type) + std::to_string(chunk);
  if (is_head_transfer()) out += "@" + std::to_string(peer_stage);
  return out;
}

Action Action::parse(const std::string& text) {
  for (const TypeName& t : kTypeNames) {
    const std::string prefix = t.prefix;
    if (text.compare(0, prefix.size(), prefix) != 0) continue;
    Action action{t.type, 0};
    std::string digits = text.substr(prefix.size());
    if (action.is_head_transfer()) {
      const size_t at = digits.find('@');
      check(at != std::string::npos,
            "\"" + text + "\" names no peer stage: head transfers are written like " + prefix +
                "3@5 (chunk 3, stage 5)");
      const std::string stage = digits.substr(at + 1);
      digits.resize(at);
      check(all_digits(stage) && stage.size() <= 9,
            "\"" + text + "\" is not an action: expected " + kForms);
      action.peer_stage = std::stoi(stage);
    }
    // Strict digits only: "F+3", "F 3" and "F3x" are typos, not actions.
    check(all_digits(digits), "\"" + text + "\" is not an action: expected " + kForms);
    check(digits.size() <= 9,
          "\"" + text + "\": chunk id " + digits + " is too large (at most 999999999)");
    action.chunk = std::stoi(digits);
    return action;
  }
  throw Error("\"" + text + "\" is not an action: expected " + kForms);
}

std::vector<int> Schedule::head_stages(int num_chunks) const {
  std::vector<int> stage_of(num_chunks, -1);
  for (int s = 0; s < num_stages(); ++s)
    for (const Action& a : stages[s])
      if (a.type == ActionType::kHead && a.chunk >= 0 && a.chunk < num_chunks)
        stage_of[a.chunk] = s;
  return stage_of;
}

std::vector<int> Schedule::rank_of_stage() const {
  std::vector<int> rank(stages.size(), -1);
  if (ranks.empty()) {
    for (size_t s = 0; s < rank.size(); ++s) rank[s] = static_cast<int>(s);
    return rank;
  }
  for (int r = static_cast<int>(ranks.size()) - 1; r >= 0; --r)
    for (int s : ranks[r])
      if (s >= 0 && s < num_stages()) rank[s] = r;
  return rank;
}

std::vector<std::vector<std::pair<int, int>>> Schedule::rank_programs() const {
  std::vector<std::vector<std::pair<int, int>>> programs(num_ranks());
  if (ranks.empty()) {
    for (int s = 0; s < num_stages(); ++s)
      for (int i = 0; i < static_cast<int>(stages[s].size()); ++i) programs[s].push_back({s, i});
    return programs;
  }
  std::vector<int> taken(stages.size(), 0);
  for (size_t r = 0; r < ranks.size(); ++r)
    for (int s : ranks[r]) {
      check(s >= 0 && s < num_stages(), "schedule: rank " + std::to_string(r) + " names stage " +
                                            std::to_string(s) + ", which does not exist (" +
                                            std::to_string(num_stages()) + " stages)");
      programs[r].push_back({s, taken[s]++});
    }
  return programs;
}

std::string Schedule::text() const {
  std::string out;
  for (int s = 0; s < num_stages(); ++s) {
    out += "stage " + std::to_string(s) + ":";
    for (const Action& a : stages[s]) out += " " + a.text();
    out += "\n";
  }
  if (ranks.empty()) return out;
  const auto programs = rank_programs();
  for (size_t r = 0; r < programs.size(); ++r) {
    out += "rank " + std::to_string(r) + ":";
    for (auto [s, i] : programs[r])
      out += " " + std::to_string(s) + ":" +
             (i < static_cast<int>(stages[s].size()) ? stages[s][i].text() : "(none)");
    out += "\n";
  }
  return out;
}

std::string Schedule::grid(int mark_stage, int mark_index) const {
  // A mark one past the end of a stage's list points at something that is missing there.
  const std::string kMissing = "(end)";
  size_t rows = 0;
  for (const auto& list : stages) rows = std::max(rows, list.size());
  const bool marked = mark_stage >= 0 && mark_stage < num_stages() && mark_index >= 0 &&
                      static_cast<size_t>(mark_index) <= stages[mark_stage].size();
  if (marked) rows = std::max(rows, static_cast<size_t>(mark_index) + 1);

  const size_t step_width = std::max<size_t>(4, std::to_string(rows).size());
  std::vector<size_t> width(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    width[s] = std::max(kMissing.size(), ("stage " + std::to_string(s)).size());
    for (const Action& a : stages[s]) width[s] = std::max(width[s], a.text().size());
  }
  // Every cell starts with a two-character gutter that holds ">>" on the marked cell, so the
  // mark never shifts the columns.
  auto pad = [](std::string text, size_t w) {
    text.resize(std::max(w, text.size()), ' ');
    return text;
  };
  std::ostringstream out;
  out << pad("step", step_width);
  for (size_t s = 0; s < stages.size(); ++s)
    out << " |  " << pad("stage " + std::to_string(s), width[s]);
  out << "\n";
  // A step of a real plan has thousands of rows: around a mark, show only its neighbourhood.
  constexpr size_t kContext = 12;
  size_t first = 0, last = rows;
  if (marked && rows > 4 * kContext) {
    first = static_cast<size_t>(mark_index) > kContext ? mark_index - kContext : 0;
    last = std::min(rows, static_cast<size_t>(mark_index) + kContext + 1);
  }
  if (first > 0) out << "  ... " << first << " earlier steps\n";
  for (size_t r = first; r < last; ++r) {
    std::string line = std::string(step_width - std::to_string(r).size(), ' ') + std::to_string(r);
    for (size_t s = 0; s < stages.size(); ++s) {
      const bool here =
          marked && static_cast<int>(s) == mark_stage && static_cast<int>(r) == mark_index;
      std::string cell = r < stages[s].size() ? stages[s][r].text() : (here ? kMissing : "");
      line += " |" + std::string(here ? ">>" : " ") + (here ? "" : " ") + pad(cell, width[s]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  if (last < rows) out << "  ... " << rows - last << " later steps\n";
  return out.str();
}

void to_json(nlohmann::json& j, const Schedule& s) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& list : s.stages) {
    nlohmann::json texts = nlohmann::json::array();
    for (const Action& a : list) texts.push_back(a.text());
    stages.push_back(std::move(texts));
  }
  j = nlohmann::json{{"stages", std::move(stages)}};
  if (!s.ranks.empty()) j["ranks"] = s.ranks;
}

void from_json(const nlohmann::json& j, Schedule& s) {
  const std::string expected = "expected {\"stages\": [[\"F0\", \"SEND_F0\", ...], ...]}";
  check(j.is_object() && j.contains("stages"),
        "schedule JSON has no \"stages\" field: " + expected);
  const nlohmann::json& stages = j.at("stages");
  check(stages.is_array(), "schedule JSON: \"stages\" is " + std::string(stages.type_name()) +
                               ", not an array: " + expected);
  Schedule result;
  for (size_t p = 0; p < stages.size(); ++p) {
    const nlohmann::json& list = stages[p];
    check(list.is_array(), "schedule JSON: stages[" + std::to_string(p) + "] is " +
                               std::string(list.type_name()) + ", not an array of actions");
    std::vector<Action> actions;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where =
          "schedule JSON: stages[" + std::to_string(p) + "][" + std::to_string(i) + "]";
      check(list[i].is_string(),
            where + " is " + std::string(list[i].type_name()) + ", not an action string");
      try {
        actions.push_back(Action::parse(list[i].get<std::string>()));
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
    }
    result.stages.push_back(std::move(actions));
  }
  if (j.contains("ranks")) {
    const std::string ranks_form =
        "expected \"ranks\": [[0, 0, 7, ...], ...], per rank the stage "
        "of each of its steps";
    const nlohmann::json& ranks = j.at("ranks");
    check(ranks.is_array() && !ranks.empty(),
          "schedule JSON: \"ranks\" is not a non-empty array: " + ranks_form);
    for (size_t r = 0; r < ranks.size(); ++r) {
      check(ranks[r].is_array(), "schedule JSON: ranks[" + std::to_string(r) + "] is " +
                                     std::string(ranks[r].type_name()) +
                                     ", not an array: " + ranks_form);
      std::vector<int> order;
      for (size_t i = 0; i < ranks[r].size(); ++i) {
        const nlohmann::json& s_json = ranks[r][i];
        if (!s_json.is_number_integer() || s_json.get<int64_t>() < 0 ||
            s_json.get<int64_t>() >= static_cast<int64_t>(result.stages.size()))
          throw Error("schedule JSON: ranks[" + std::to_string(r) + "][" + std::to_string(i) +
                      "] is " + s_json.dump() + ", not one of the " +
                      std::to_string(result.stages.size()) + " stages: " + ranks_form);
        order.push_back(s_json.get<int>());
      }
      result.ranks.push_back(std::move(order));
    }
  }
  s = std::move(result);
}

}  // namespace infinipipe
