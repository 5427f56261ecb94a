#include "transport/transport.hpp"

#include "absl/strings/str_cat.h"
#include "transport/shm/context.hpp"
#include "transport/tcp/context.hpp"

namespace weft::transport {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(std::string_view name,
                                                          const TransportInit& init) {
  if (name == "shm") return shm::make_transport(init);
  if (name == "tcp") return tcp::make_transport(init);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", std::string(name), "'; known: shm, tcp"));
}

}  // namespace weft::transport
