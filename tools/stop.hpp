// Ending a run of cycles (-N, -N 0: until stopped) cleanly. SIGINT, SIGTERM and SIGUSR1 only
// raise a flag that the bench reads after each row, so the rows so far, the footer and an
// exit status that says whether anything was wrong still come out. Later signals do the
// same: the row under way ends by the library's deadline at the latest.
#pragma once

namespace weft::tools {

/// From now on, SIGINT, SIGTERM and SIGUSR1 set the flag instead of ending the process.
void catch_stop_signals();
/// Whether one arrived.
bool stop_requested();

}  // namespace weft::tools
