#include "tools/diag/gather.hpp"

#include <algorithm>
#include <string>

namespace weft::tools::diag {

absl::StatusOr<std::vector<nlohmann::json>> gather_json(Communicator& comm,
                                                        const nlohmann::json& mine) {
  const int n = comm.size();
  const std::string text = mine.dump();
  // Lengths first, then every text padded to the longest: allgather takes equal blocks.
  uint64_t length = text.size();
  std::vector<uint64_t> lengths(n);
  if (auto s = comm.allgather(&length, lengths.data(), 1, DataType::kUint64); !s.ok()) return s;
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::string padded = text;
  padded.resize(longest, ' ');
  std::string all(longest * n, ' ');
  if (auto s = comm.allgather(padded.data(), all.data(), longest, DataType::kUint8); !s.ok()) {
    return s;
  }
  std::vector<nlohmann::json> out;
  for (int r = 0; r < n; ++r) {
    out.push_back(nlohmann::json::parse(all.substr(r * longest, lengths[r]), nullptr,
                                        /*allow_exceptions=*/false));
    if (out.back().is_discarded()) {
      return absl::DataLossError("rank " + std::to_string(r) + " sent JSON that does not parse");
    }
  }
  return out;
}

}  // namespace weft::tools::diag
