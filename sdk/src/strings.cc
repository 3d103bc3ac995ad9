#include "sluice/strings.h"

namespace sluice {

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string_view::npos) j = s.size();
    std::string_view item = s.substr(i, j - i);
    const auto b = item.find_first_not_of(" \t");
    if (b != std::string_view::npos) {
      const auto e = item.find_last_not_of(" \t");
      out.emplace_back(item.substr(b, e - b + 1));
    }
    i = j + 1;
  }
  return out;
}

}  // namespace sluice
