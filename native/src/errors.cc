#include "errors.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "libbpf_log.h"

namespace bpfnative {

namespace {
constexpr int kENOTSUPP = 524;  // kernel-internal, returned by some bpf() commands

Napi::Error MakeError(Napi::Env env, int err, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("errno", Napi::Number::New(env, err));
  error.Set("code", Napi::String::New(env, ErrnoCode(err)));
  return error;
}
}  // namespace

std::string ErrnoCode(int err) {
  if (err < 0) err = -err;
  if (err == kENOTSUPP) return "ENOTSUPP";
  const char* name = strerrorname_np(err);  // glibc >= 2.32
  return name ? std::string(name) : "E" + std::to_string(err);
}

std::string ErrnoText(int err) {
  if (err < 0) err = -err;
  if (err == kENOTSUPP) return "Operation not supported";
  char buf[128];
  return std::string(strerror_r(err, buf, sizeof(buf)));
}

void ThrowErrno(Napi::Env env, int err, const std::string& what, uint64_t logMark, size_t logTail) {
  if (err < 0) err = -err;
  if (err == 0) err = EIO;  // a failing call that left errno unset: still report something
  std::string message = what + " failed: " + ErrnoText(err) + " (" + ErrnoCode(err) + ")";
  std::vector<std::string> lines;
  if (logMark != kNoLog) {
    lines = LogLinesSince(logMark, logTail);
    if (!lines.empty()) {
      message += "\nlibbpf log (last " + std::to_string(lines.size()) + " lines):";
      for (const auto& line : lines) message += "\n  " + line;
    }
  }
  Napi::Error error = MakeError(env, err, message);
  // The same lines as data, so that callers read them without parsing the message.
  Napi::Array log = Napi::Array::New(env, lines.size());
  for (size_t i = 0; i < lines.size(); i++) log.Set(i, lines[i]);
  error.Set("log", log);
  throw error;
}

void ThrowState(Napi::Env env, int err, const std::string& message) {
  throw MakeError(env, err < 0 ? -err : err, message);
}

}  // namespace bpfnative
