// Interns names into the string table a RankTrace carries (id 0 is "").
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof::kineto {

class Interner {
 public:
  Interner() { texts_.emplace_back(); }
  StringId intern(std::string_view s) {
    if (s.empty()) return kNoString;
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    texts_.emplace_back(s);
    const auto id = StringId(texts_.size() - 1);
    ids_.emplace(std::string_view(texts_.back()), id);
    return id;
  }
  std::string_view text(StringId id) const { return id < texts_.size() ? std::string_view(texts_[id]) : std::string_view(); }
  std::vector<std::string> take() { return std::vector<std::string>(texts_.begin(), texts_.end()); }

 private:
  std::deque<std::string> texts_;  // deque: the views in ids_ stay valid as it grows
  std::unordered_map<std::string_view, StringId> ids_;
};

}  // namespace memcomm::prof::kineto
