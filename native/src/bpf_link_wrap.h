// JS class BpfLink: owns one struct bpf_link.
#pragma once

#include <bpf/libbpf.h>
#include <napi.h>

#include <memory>
#include <string>

namespace bpfnative {

class BpfLinkWrap : public Napi::ObjectWrap<BpfLinkWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  // Wraps `link` (ownership taken, also on failure). `owner` keeps the bpf_object alive for as
  // long as the link exists: some links (USDT) reach into object state when detached.
  // `hasFd` is false for composite links (USDT: one uprobe per call site), whose
  // bpf_link__fd() is meaningless in libbpf 1.1 (returns 0) and which cannot be pinned.
  static Napi::Object New(Napi::Env env, struct bpf_link* link,
                          std::shared_ptr<struct bpf_object> owner, std::string description,
                          bool hasFd = true);

  explicit BpfLinkWrap(const Napi::CallbackInfo& info);
  ~BpfLinkWrap() override;

 private:
  struct bpf_link* Live(Napi::Env env, const char* op);
  void RequireFd(Napi::Env env, const char* op);

  void Destroy(const Napi::CallbackInfo& info);
  void Pin(const Napi::CallbackInfo& info);
  void Unpin(const Napi::CallbackInfo& info);
  Napi::Value Fd(const Napi::CallbackInfo& info);

  struct bpf_link* link_ = nullptr;
  std::shared_ptr<struct bpf_object> owner_;
  std::string description_;
  bool hasFd_ = true;
};

}  // namespace bpfnative
