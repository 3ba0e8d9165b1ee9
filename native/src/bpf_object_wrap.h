// JS class BpfObject: owns one struct bpf_object (open -> configure -> load -> attach).
#pragma once

#include <bpf/libbpf.h>
#include <napi.h>

#include <memory>
#include <string>

namespace bpfnative {

class BpfObjectWrap : public Napi::ObjectWrap<BpfObjectWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit BpfObjectWrap(const Napi::CallbackInfo& info);

 private:
  // Accessors that throw when the object is closed or the name is unknown.
  struct bpf_object* Obj(Napi::Env env);
  struct bpf_program* Prog(const Napi::CallbackInfo& info, size_t argIndex);
  struct bpf_map* Map(const Napi::CallbackInfo& info, size_t argIndex);
  Napi::Value WholeMap(const Napi::CallbackInfo& info, bool take);
  void RequireNotLoaded(Napi::Env env, const char* op);
  Napi::Value WrapLink(Napi::Env env, struct bpf_link* link, int err, uint64_t logMark,
                       const std::string& call, const std::string& subject, bool hasFd = true);

  // Introspection and pre-load configuration.
  Napi::Value Programs(const Napi::CallbackInfo& info);
  Napi::Value Maps(const Napi::CallbackInfo& info);
  void SetAutoload(const Napi::CallbackInfo& info);
  void SetMaxEntries(const Napi::CallbackInfo& info);
  void SetAttachTarget(const Napi::CallbackInfo& info);
  void ReuseMapFd(const Napi::CallbackInfo& info);
  Napi::Value Rodata(const Napi::CallbackInfo& info);
  void SetRodata(const Napi::CallbackInfo& info);
  void ReadBss(const Napi::CallbackInfo& info);
  void WriteBss(const Napi::CallbackInfo& info);
  void Load(const Napi::CallbackInfo& info);
  void Close(const Napi::CallbackInfo& info);

  // Attachment (each returns a BpfLink).
  Napi::Value Attach(const Napi::CallbackInfo& info);
  Napi::Value AttachTracepoint(const Napi::CallbackInfo& info);
  Napi::Value AttachRawTracepoint(const Napi::CallbackInfo& info);
  Napi::Value AttachUsdt(const Napi::CallbackInfo& info);
  Napi::Value AttachUprobe(const Napi::CallbackInfo& info);
  Napi::Value AttachPerfEvent(const Napi::CallbackInfo& info);

  // Maps.
  Napi::Value MapLayout(const Napi::CallbackInfo& info);
  Napi::Value MapLookup(const Napi::CallbackInfo& info);
  void MapUpdate(const Napi::CallbackInfo& info);
  Napi::Value MapDelete(const Napi::CallbackInfo& info);
  Napi::Value MapLookupAndDelete(const Napi::CallbackInfo& info);
  Napi::Value MapLookupBatch(const Napi::CallbackInfo& info);
  Napi::Value MapLookupAndDeleteBatch(const Napi::CallbackInfo& info);
  Napi::Value MapLookupKeys(const Napi::CallbackInfo& info);
  Napi::Value MapDeleteBatch(const Napi::CallbackInfo& info);
  Napi::Value MapFd(const Napi::CallbackInfo& info);
  void PinMap(const Napi::CallbackInfo& info);
  void UnpinMap(const Napi::CallbackInfo& info);

  // Shared with every BpfLink created from this object: bpf_object__close() runs when the
  // object is closed (or collected) AND all its links are destroyed.
  std::shared_ptr<struct bpf_object> obj_;
  std::string path_;
  bool loaded_ = false;  // load() was called (successfully or not)

  // The loaded .bss map's memory, mapped on first readBss()/writeBss() and unmapped on close.
  uint8_t* BssBytes(Napi::Env env, const char* what, uint64_t offset, size_t length);
  struct MappedBss {
    void* addr = nullptr;
    size_t length = 0;  // of the mapping (whole pages)
    size_t size = 0;    // of the section
    ~MappedBss();
  };
  std::unique_ptr<MappedBss> bss_;
};

}  // namespace bpfnative
