// A tcp link's sending half, its paths (outbound.hpp says how it sends): which rails carry
// its frames, the acknowledgements and resend requests read back on their control sockets,
// and each resumption on the paths that are left.
#include "transport/tcp/outbound.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weft::transport::tcp {

std::string Outbound::live_names() const {
  std::string out;
  for (size_t i : live_) absl::StrAppend(&out, out.empty() ? "" : ", ", paths_[i]->name());
  return out;
}

bool Outbound::usable(size_t i) const {
  const auto carries = [this](size_t p) {
    return paths_[p]->alive() && control_[p]->alive() && ((out_of_use_ >> p) & 1U) == 0;
  };
  if (!carries(i)) return false;
  // Added paths join the rails unless a detour is asked for or undone; then the other set
  // carries only when the preferred one has nothing left.
  const bool added = i >= direct_;
  if (paths_.size() == direct_ || added == detour_) return true;
  for (size_t p = detour_ ? direct_ : 0; p < (detour_ ? paths_.size() : direct_); ++p) {
    if (carries(p)) return false;
  }
  return true;
}

void Outbound::detour(bool on) {
  if (detour_ == on || !failed_.ok()) return;
  detour_ = on;
  uint64_t live = 0, usable_now = 0;
  for (size_t p : live_) live |= uint64_t{1} << p;
  for (size_t p = 0; p < paths_.size(); ++p) usable_now |= uint64_t{usable(p)} << p;
  if (live == usable_now) return;  // no path of the other set yet: the change waits for one
  restart(acked_, on ? "a detour around the link's failing rails"
                     : "the detour ends: back on the link's rails");
}

void Outbound::set_in_use(size_t i, bool in_use, bool announce) {
  if (i >= paths_.size() || i >= 32 || !failed_.ok()) return;
  const uint32_t want = in_use ? want_out_of_use_ & ~(1U << i) : want_out_of_use_ | (1U << i);
  if (!in_use) {
    size_t others = 0;
    for (size_t p = 0; p < paths_.size(); ++p) {
      others += p != i && paths_[p]->alive() && control_[p]->alive() && ((want >> p) & 1U) == 0;
    }
    if (others == 0) return;  // the link's last rail carries on
  }
  want_out_of_use_ = want;
  announce_use_ = announce;
  apply_use();
}

void Outbound::apply_use() {
  if (want_out_of_use_ == out_of_use_ || (cur_.active && cur_.sent > 0) || !failed_.ok()) return;
  const uint32_t changed = want_out_of_use_ ^ out_of_use_;
  out_of_use_ = want_out_of_use_;
  std::string why;
  for (size_t p = 0; p < paths_.size() && p < 32; ++p) {
    if (((changed >> p) & 1U) == 0) continue;
    absl::StrAppend(&why, why.empty() ? "" : ", ", paths_[p]->name(),
                    ((out_of_use_ >> p) & 1U) != 0 ? " taken out of use" : " back in use");
  }
  // From the last byte sent: the receiver has every earlier one, or will read it where it
  // went (the rail stays open), and looks everywhere for what follows (Inbound::rails_changed).
  restart(wire_, why, /*quiet=*/!announce_use_);
}

void Outbound::notice_deaths() {
  for (size_t i : live_) {
    if (!usable(i)) return restart(acked_, absl::StrCat(paths_[i]->name(), " failed"));
  }
}

std::vector<Path*> Outbound::why_rails_failed() const {
  std::vector<Path*> out;
  for (size_t i = 0; i < paths_.size(); ++i) {
    out.push_back(paths_[i]->alive() ? control_[i] : paths_[i]);
  }
  return out;
}

// Every live rail may carry control frames back. By index, not over live_: a resend request
// can restart the epoch (and rebuild live_) midway, and a copy would allocate on the data path.
void Outbound::read_all_control(uint64_t enough) {
  for (size_t i = 0; i < paths_.size() && failed_.ok() && acked_ < enough; ++i) {
    if (control_[i]->alive()) read_control(i, enough);
  }
}

void Outbound::read_control(size_t i, uint64_t enough) {
  Path& path = *control_[i];
  for (int frames = 0; frames < 64 && path.alive() && acked_ < enough; ++frames) {
    auto header = path.read_header();
    if (!header.ok()) return control_lost(i, std::string(header.status().message()));
    if (!header->has_value()) return;
    const Frame& f = **header;
    if (f.type == Frame::kAck) {
      acked_ = std::max(acked_, std::min(f.offset, staged_));
    } else if (f.type == Frame::kResend) {
      acked_ = std::max(acked_, std::min(f.offset, staged_));
      for (size_t p = 0; p < paths_.size() && p < 32; ++p) {
        if ((f.length >> p) & 1U && paths_[p]->alive()) {
          paths_[p]->kill(absl::StrCat("rank ", events_->peer(), " lost it"));
          events_->path_lost("sending", *paths_[p], wire_);
        }
      }
      if (f.epoch >= epoch_) {
        restart(acked_, absl::StrCat("rank ", events_->peer(), " asked for offset ", f.offset,
                                     " again"));
      } else {
        // Resumed since, but the epoch may have striped bytes over a path the receiver has
        // lost since: those went nowhere, so it starts again without that path.
        notice_deaths();
      }
      if (!failed_.ok()) return;
    } else {
      return control_lost(i, "a data frame where only acknowledgements belong: out of step");
    }
  }
}

// A rail whose control socket failed carries no acknowledgements: nothing more is sent on
// it. When the peer closed that socket the data twin lives on for the receiving half, to
// read what the peer still sent there; any other failure took it too (Path::kill).
void Outbound::control_lost(size_t i, std::string cause) {
  Path& control = *control_[i];
  if (control.alive()) {
    control.kill(std::move(cause));
    events_->path_lost("sending", control, wire_);
  }
  notice_deaths();
}

void Outbound::lost(size_t i, std::string cause) {
  Path& path = *paths_[i];
  const bool was_alive = path.alive();
  path.kill(std::move(cause));
  if (was_alive) events_->path_lost("sending", path, wire_);
  // A frame under way there can never be finished: dropped, or push() would write it to the
  // dead socket for ever (an orphan lives on a path outside live_, which restarts nothing).
  if (cur_.active && cur_.path == i) cur_.active = false;
  if (std::find(live_.begin(), live_.end(), i) == live_.end()) return;
  restart(acked_, absl::StrCat(path.name(), " failed"));
}

void Outbound::restart(uint64_t from, const std::string& why, bool quiet) {
  live_.clear();
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (usable(i)) live_.push_back(i);
  }
  if (live_.empty()) {
    cur_.active = false;  // its socket is dead
    if (!may_strand_) failed_ = events_->no_path_left("sending", why_rails_failed());
    return;
  }
  // A frame half on a live socket must be finished, or that socket's stream is out of step;
  // the receiver drops it as an earlier epoch's (or uses it, if it is what it needs next).
  if (cur_.active) {
    if (paths_[cur_.path]->alive() && cur_.sent > 0) {
      cur_.orphan = true;
    } else {
      cur_.active = false;
    }
  }
  const uint64_t resent = sent_end_ > from ? sent_end_ - from : 0;
  ++epoch_;
  epoch_start_ = from;
  wire_ = from;
  events_->resumed(epoch_, from, resent, why, live_names(), quiet);
}

void Outbound::add_path(Path* data, Path* control, const std::string& why) {
  paths_.push_back(data);
  control_.push_back(control);
  restart(acked_, why);
}

}  // namespace weft::transport::tcp
