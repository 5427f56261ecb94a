#include "src/device/copier.hpp"

namespace weft::device {

absl::Status await_word(Copier& copier, Word word, uint32_t number, const Deadline& deadline,
                        std::string_view what) {
  Backoff backoff;
  while (!reached(copier.read(word), number)) {
    if (deadline.expired()) return deadline_error(what, deadline);
    backoff.pause();
  }
  return absl::OkStatus();
}

}  // namespace weft::device
