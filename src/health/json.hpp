// The monitor's states as JSON: one line per state change (the structured log), and the
// whole snapshot (the endpoint's /health, `weft health`). Field names are a contract with
// scripts: add, never rename.
#pragma once

#include <string>
#include <vector>

#include "src/health/judge.hpp"
#include "src/health/monitor.hpp"

namespace weft::health {

/// "2026-12-02T01:02:03.456Z" (UTC, milliseconds): every time weft writes in JSON; empty
/// for InfinitePast (never).
std::string iso_time(absl::Time t);

/// {"event":"weft_health_change","time":"2026-12-02T01:02:03.456Z","rank":1,"scope":"rail 0
/// (weft-r0) to rank 2","kind":"rail","peer":2,"rail":0,...,"counter":"tcp_retransmits",
/// "value":812,"measure":"rate","rate":96.5,"threshold":20,"window_s":5,"from":"HEALTHY",
/// "to":"FAILING","reason":"..."} on one line, without a newline.
std::string change_json_line(int rank, const Change& change);

/// {"rank":1,"time":...,"policy":{...},"scopes":[{"scope":...,"state":...,"since":...,
/// "reason":...,"counters":{"tcp_retransmits":{"value":812,"rate":96.5}, ...}}, ...]}
std::string health_json(int rank, const std::vector<ScopeHealth>& scopes, absl::Time now);

}  // namespace weft::health
