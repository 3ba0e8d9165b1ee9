// Argument checking for the JS-facing methods. The TypeScript layer validates user input;
// these checks only keep a wrong call from reaching libbpf with garbage (TypeError).
#pragma once

#include <napi.h>

#include <cstdint>
#include <optional>
#include <string>

namespace bpfnative {

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* name);
std::optional<std::string> ArgOptString(const Napi::CallbackInfo& info, size_t i, const char* name);
bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name);
int32_t ArgInt32(const Napi::CallbackInfo& info, size_t i, const char* name);
uint32_t ArgUint32(const Napi::CallbackInfo& info, size_t i, const char* name);
// Non-negative integer up to 2^53 (JS safe integer).
uint64_t ArgSize(const Napi::CallbackInfo& info, size_t i, const char* name);
Napi::Buffer<uint8_t> ArgBuffer(const Napi::CallbackInfo& info, size_t i, const char* name);

// number | bigint as an unsigned 64-bit value (numbers must be safe non-negative integers).
uint64_t ToU64(Napi::Env env, Napi::Value v, const char* name);
int32_t ToInt32(Napi::Env env, Napi::Value v, const char* name);
uint64_t ToSafeUint(Napi::Env env, Napi::Value v, const char* name);

}  // namespace bpfnative
