#include "libbpf_log.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <deque>
#include <mutex>

namespace bpfnative {
namespace {

constexpr size_t kRingLines = 500;

struct Ring {
  std::mutex mu;
  std::deque<std::pair<uint64_t, std::string>> lines;
  uint64_t nextSeq = 0;
  uint64_t drainedUpTo = 0;  // first sequence number DrainLog() has not returned yet
};

Ring& TheRing() {
  static Ring* ring = new Ring();  // never destroyed: libbpf may print during process exit
  return *ring;
}

// WARN and INFO only: DEBUG is hundreds of lines per load and would push the verifier log
// (printed at WARN level) out of the ring.
int PrintCallback(enum libbpf_print_level level, const char* fmt, va_list ap) {
  if (level == LIBBPF_DEBUG) return 0;

  va_list copy;
  va_copy(copy, ap);
  int len = vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (len <= 0) return 0;
  std::string text(static_cast<size_t>(len) + 1, '\0');
  vsnprintf(text.data(), text.size(), fmt, ap);
  text.resize(static_cast<size_t>(len));

  // One message may hold many lines (the verifier log is a single message).
  Ring& ring = TheRing();
  std::lock_guard<std::mutex> lock(ring.mu);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ring.lines.emplace_back(ring.nextSeq++, text.substr(start, end - start));
    if (ring.lines.size() > kRingLines) ring.lines.pop_front();
    start = end + 1;
  }
  return len;
}

}  // namespace

void InstallLibbpfLogger() { libbpf_set_print(PrintCallback); }

uint64_t LogMark() {
  Ring& ring = TheRing();
  std::lock_guard<std::mutex> lock(ring.mu);
  return ring.nextSeq;
}

std::vector<std::string> LogLinesSince(uint64_t mark, size_t maxLines) {
  Ring& ring = TheRing();
  std::lock_guard<std::mutex> lock(ring.mu);
  std::vector<std::string> out;
  for (auto it = ring.lines.rbegin(); it != ring.lines.rend() && out.size() < maxLines; ++it) {
    if (it->first < mark) break;
    out.push_back(it->second);
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> DrainLog() {
  Ring& ring = TheRing();
  std::lock_guard<std::mutex> lock(ring.mu);
  std::vector<std::string> out;
  for (const auto& [seq, line] : ring.lines) {
    if (seq >= ring.drainedUpTo) out.push_back(line);
  }
  ring.drainedUpTo = ring.nextSeq;
  return out;
}

}  // namespace bpfnative
