// Addon entry point: class registration and the free functions.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <malloc.h>
#include <napi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "addon_data.h"
#include "args.h"
#include "bpf_link_wrap.h"
#include "bpf_object_wrap.h"
#include "errors.h"
#include "libbpf_log.h"

namespace bpfnative {
namespace {

Napi::Value NumPossibleCpus(const Napi::CallbackInfo& info) {
  int n = libbpf_num_possible_cpus();
  if (n < 0) ThrowErrno(info.Env(), n, "libbpf_num_possible_cpus()");
  return Napi::Number::New(info.Env(), n);
}

Napi::Value LibbpfVersion(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), std::to_string(libbpf_major_version()) + "." +
                                           std::to_string(libbpf_minor_version()));
}

Napi::Value DrainLogJs(const Napi::CallbackInfo& info) {
  auto lines = DrainLog();
  Napi::Array arr = Napi::Array::New(info.Env(), lines.size());
  for (size_t i = 0; i < lines.size(); i++) arr.Set(i, lines[i]);
  return arr;
}

Napi::Value ProbeProgType(const Napi::CallbackInfo& info) {
  uint32_t type = ArgUint32(info, 0, "type");
  uint64_t mark = LogMark();
  int r = libbpf_probe_bpf_prog_type(static_cast<enum bpf_prog_type>(type), nullptr);
  if (r < 0) {
    ThrowErrno(info.Env(), r, "libbpf_probe_bpf_prog_type(" + std::to_string(type) + ")", mark);
  }
  return Napi::Boolean::New(info.Env(), r > 0);
}

// Opens (disabled) and closes a counting event on the calling process, to learn whether
// the PMU/event exists. Failure is an answer here, not an exception.
Napi::Value ProbePerfEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t type = ArgUint32(info, 0, "type");
  uint64_t config = ToU64(env, info.Length() > 1 ? info[1] : env.Undefined(), "config");
  struct perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = type;
  attr.config = config;
  attr.disabled = 1;
  int fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) close(fd);
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", fd >= 0);
  out.Set("errno", err);
  return out;
}

Napi::Value BpfStatsEnable(const Napi::CallbackInfo& info) {
  int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd < 0) ThrowErrno(info.Env(), fd, "bpf_enable_stats(BPF_STATS_RUN_TIME)");
  return Napi::Number::New(info.Env(), fd);
}

// Loading an object parses the kernel's BTF (megabytes of it) into malloc'd memory that is freed
// after load but kept by glibc's heap: giving it back lowered an idle collector's RSS by 12 MB.
// With the thresholds fixed (KeepLargeBlocksOutOfTheHeap) it still gives back 1-3 MB of small
// blocks (bench/idle-cost.ts, alternating builds with and without it).
Napi::Value ReleaseFreeMemory(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), malloc_trim(0) != 0);
}

// glibc moves its mmap threshold up to the size of each large block freed (up to 32 MB), and its
// trim threshold to twice that. After loading freed the kernel's BTF, later large blocks (a
// flush's map reads and statements, V8's compiler zones) came from the heap and stayed there:
// 27 MB of heap in an idle collector, 4 MB with the thresholds fixed at glibc's defaults (fixing
// them turns the moving off). Large blocks are mapped and unmapped instead
// (bench/journal/memory.md#large-blocks-leave-the-heap).
void KeepLargeBlocksOutOfTheHeap() {
  constexpr int kThreshold = 128 * 1024;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  KeepLargeBlocksOutOfTheHeap();
  InstallLibbpfLogger();

  Napi::Function linkCtor = BpfLinkWrap::Define(env);
  auto* data = new AddonData();
  data->linkCtor = Napi::Persistent(linkCtor);
  env.SetInstanceData(data);  // deleted by Node when the environment goes away

  exports.Set("BpfObject", BpfObjectWrap::Define(env));
  exports.Set("BpfLink", linkCtor);
  exports.Set("numPossibleCpus", Napi::Function::New<NumPossibleCpus>(env, "numPossibleCpus"));
  exports.Set("libbpfVersion", Napi::Function::New<LibbpfVersion>(env, "libbpfVersion"));
  exports.Set("drainLog", Napi::Function::New<DrainLogJs>(env, "drainLog"));
  exports.Set("probeProgType", Napi::Function::New<ProbeProgType>(env, "probeProgType"));
  exports.Set("probePerfEvent", Napi::Function::New<ProbePerfEvent>(env, "probePerfEvent"));
  exports.Set("bpfStatsEnable", Napi::Function::New<BpfStatsEnable>(env, "bpfStatsEnable"));
  exports.Set("releaseFreeMemory",
              Napi::Function::New<ReleaseFreeMemory>(env, "releaseFreeMemory"));
  return exports;
}

}  // namespace
}  // namespace bpfnative

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) {
  return bpfnative::Init(env, exports);
}

NODE_API_MODULE(bpf_native, InitAddon)
