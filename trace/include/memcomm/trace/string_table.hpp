// StringTable: interns names once (slow path, locked) and hands out StringIds that events carry.
// Text pointers stay valid for the table's lifetime, so hooks may keep `const char*` names.
// The collector exports the strings added since its last export; see Recorder's string ordering
// rule in recorder.cpp (Note [Strings before events]).
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memcomm/trace/event.hpp"
#include "memcomm/trace/trace_writer.hpp"

namespace memcomm::prof {

class StringTable {
 public:
  StringTable() { texts_.emplace_back(); }  // id 0 = ""

  StringId intern(std::string_view s) {
    if (s.empty()) return kNoString;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    texts_.emplace_back(s);
    const StringId id = StringId(texts_.size() - 1);
    ids_.emplace(std::string_view(texts_.back()), id);
    return id;
  }
  // Text of an id ("" when unknown). The pointer is stable.
  const char* text(StringId id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return id < texts_.size() ? texts_[id].c_str() : "";
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return texts_.size();
  }
  // Appends definitions of ids [from, size()) to out and returns the new size.
  StringId export_since(StringId from, std::vector<StringDef>& out) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = from == 0 ? 1 : from; i < texts_.size(); ++i) out.push_back({StringId(i), texts_[i]});
    return StringId(texts_.size());
  }

 private:
  mutable std::mutex mu_;
  std::deque<std::string> texts_;  // deque: element addresses survive growth
  std::unordered_map<std::string_view, StringId> ids_;
};

}  // namespace memcomm::prof
