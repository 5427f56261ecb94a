#include "src/inject_file.hpp"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weft::detail {

absl::StatusOr<std::vector<InjectedCorruption>> parse_inject_file(const std::string& text) {
  std::vector<InjectedCorruption> out;
  int number = 0;
  for (const std::string& raw : std::vector<std::string>(absl::StrSplit(text, '\n'))) {
    ++number;
    std::string line = raw.substr(0, raw.find('#'));
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (words.empty()) continue;
    InjectedCorruption c;
    if (words[0] != "corrupt" || words.size() < 3 || !absl::SimpleAtod(words[1], &c.rate) ||
        !(c.rate >= 0 && c.rate <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", number, " (", line, ") is not 'corrupt RATE IP [IP ...]' with 0 <= RATE <= 1"));
    }
    c.ips.assign(words.begin() + 2, words.end());
    out.push_back(std::move(c));
  }
  return out;
}

double corruption_for(const std::vector<InjectedCorruption>& faults,
                      const std::string& tcp_address) {
  for (const std::string& entry : std::vector<std::string>(absl::StrSplit(tcp_address, ','))) {
    const std::string ip = entry.substr(0, entry.rfind(':'));
    for (const InjectedCorruption& c : faults) {
      for (const std::string& want : c.ips) {
        if (want == ip) return c.rate;
      }
    }
  }
  return 0;
}

}  // namespace weft::detail
