// Per-environment state (one per Node.js main thread / worker that loads the addon).
#pragma once

#include <napi.h>

namespace bpfnative {

struct AddonData {
  Napi::FunctionReference linkCtor;  // BpfLink, instantiated by BpfObject.attach*()
};

inline AddonData& GetAddonData(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

}  // namespace bpfnative
