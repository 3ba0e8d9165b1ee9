#include "args.h"

#include <cmath>

namespace bpfnative {

namespace {
constexpr double kMaxSafe = 9007199254740991.0;  // Number.MAX_SAFE_INTEGER

[[noreturn]] void TypeErr(Napi::Env env, const char* name, const char* expected) {
  throw Napi::TypeError::New(env, std::string(name) + " must be " + expected);
}

Napi::Value Arg(const Napi::CallbackInfo& info, size_t i) {
  return i < info.Length() ? info[i] : info.Env().Undefined();
}
}  // namespace

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsString()) TypeErr(info.Env(), name, "a string");
  return v.As<Napi::String>().Utf8Value();
}

std::optional<std::string> ArgOptString(const Napi::CallbackInfo& info, size_t i,
                                        const char* name) {
  Napi::Value v = Arg(info, i);
  if (v.IsNull() || v.IsUndefined()) return std::nullopt;
  return ArgString(info, i, name);
}

bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsBoolean()) TypeErr(info.Env(), name, "a boolean");
  return v.As<Napi::Boolean>().Value();
}

int32_t ToInt32(Napi::Env env, Napi::Value v, const char* name) {
  if (!v.IsNumber()) TypeErr(env, name, "an int32 number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (std::trunc(d) != d || d < INT32_MIN || d > INT32_MAX) TypeErr(env, name, "an int32 number");
  return static_cast<int32_t>(d);
}

uint64_t ToSafeUint(Napi::Env env, Napi::Value v, const char* name) {
  if (!v.IsNumber()) TypeErr(env, name, "a non-negative integer");
  double d = v.As<Napi::Number>().DoubleValue();
  if (std::trunc(d) != d || d < 0 || d > kMaxSafe) TypeErr(env, name, "a non-negative integer");
  return static_cast<uint64_t>(d);
}

uint64_t ToU64(Napi::Env env, Napi::Value v, const char* name) {
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t u = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) TypeErr(env, name, "a bigint in [0, 2^64)");
    return u;
  }
  return ToSafeUint(env, v, name);
}

int32_t ArgInt32(const Napi::CallbackInfo& info, size_t i, const char* name) {
  return ToInt32(info.Env(), Arg(info, i), name);
}

uint32_t ArgUint32(const Napi::CallbackInfo& info, size_t i, const char* name) {
  uint64_t u = ToSafeUint(info.Env(), Arg(info, i), name);
  if (u > UINT32_MAX) TypeErr(info.Env(), name, "a uint32 number");
  return static_cast<uint32_t>(u);
}

uint64_t ArgSize(const Napi::CallbackInfo& info, size_t i, const char* name) {
  return ToSafeUint(info.Env(), Arg(info, i), name);
}

Napi::Buffer<uint8_t> ArgBuffer(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsBuffer()) TypeErr(info.Env(), name, "a Buffer");
  return v.As<Napi::Buffer<uint8_t>>();
}

}  // namespace bpfnative
