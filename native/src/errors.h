// Conversion of errno-style failures into JS exceptions.
//
// Every failure becomes an Error with `errno` (positive) and `code` ('ENOENT', else 'E<n>'),
// whose message names the failing call and its subject, then strerror, then the libbpf
// messages printed during the call (when a log mark is given).
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace bpfnative {

constexpr uint64_t kNoLog = UINT64_MAX;

// 'ENOENT' style name for an errno value, 'E<n>' when unknown.
std::string ErrnoCode(int err);

// strerror() text; also names the kernel-internal ENOTSUPP (524).
std::string ErrnoText(int err);

// Throws Error("<what> failed: <strerror> (<code>)" + libbpf log tail); the tail's lines are
// also its `log` (an array, empty without a log mark).
// `err` may be given negative (libbpf return value) or positive (errno).
[[noreturn]] void ThrowErrno(Napi::Env env, int err, const std::string& what,
                             uint64_t logMark = kNoLog, size_t logTail = 10);

// Same shape for failures detected by the binding itself (bad state, out of range...).
[[noreturn]] void ThrowState(Napi::Env env, int err, const std::string& message);

}  // namespace bpfnative
