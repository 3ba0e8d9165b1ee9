// Capture of libbpf's own messages (libbpf_set_print) into a bounded in-memory ring, so that
// they can be returned to JS (drainLog) and quoted in error messages (verifier log on load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpfnative {

// Installs the print callback. Idempotent; process-wide (libbpf's printer is global).
void InstallLibbpfLogger();

// Sequence number the next captured line will get; pass it to LogLinesSince() later.
uint64_t LogMark();

// Up to `maxLines` most recent lines captured at or after `mark` (still in the ring).
std::vector<std::string> LogLinesSince(uint64_t mark, size_t maxLines);

// Lines captured since the previous DrainLog() call (bounded by the ring size).
std::vector<std::string> DrainLog();

}  // namespace bpfnative
