#include "src/health/sample.hpp"

#include "absl/strings/str_cat.h"

namespace weft::health {

const char* scope_kind_name(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::kLink: return "link";
    case ScopeKind::kRail: return "rail";
    case ScopeKind::kGpu: return "gpu";
    case ScopeKind::kNvlink: return "nvlink";
    case ScopeKind::kIbPort: return "ib_port";
  }
  return "unknown";
}

std::string Scope::name() const {
  switch (kind) {
    case ScopeKind::kLink: return absl::StrCat("link to rank ", peer);
    case ScopeKind::kRail: return absl::StrCat("rail ", rail, " (", device, ") to rank ", peer);
    case ScopeKind::kGpu: return absl::StrCat("gpu ", gpu, " (", device, ")");
    case ScopeKind::kNvlink:
      return peer >= 0 ? absl::StrCat("nvlink ", link, " of gpu ", gpu, " to rank ", peer)
                       : absl::StrCat("nvlink ", link, " of gpu ", gpu, " to ", device);
    case ScopeKind::kIbPort:
      return rail >= 0 ? absl::StrCat("ib ", device, " port ", link, " (rail ", rail, ")")
                       : absl::StrCat("ib ", device, " port ", link);
  }
  return "unknown scope";
}

}  // namespace weft::health
