#include "bpf_link_wrap.h"

#include <cerrno>

#include "addon_data.h"
#include "args.h"
#include "errors.h"
#include "libbpf_log.h"

namespace bpfnative {

namespace {
// Hand-over from New() to the constructor; JS code cannot construct a BpfLink itself.
struct PendingLink {
  struct bpf_link* link;
  std::shared_ptr<struct bpf_object> owner;
  std::string description;
  bool hasFd;
};
thread_local PendingLink* tPending = nullptr;
}  // namespace

Napi::Function BpfLinkWrap::Define(Napi::Env env) {
  return DefineClass(env, "BpfLink",
                     {
                         InstanceMethod<&BpfLinkWrap::Destroy>("destroy"),
                         InstanceMethod<&BpfLinkWrap::Pin>("pin"),
                         InstanceMethod<&BpfLinkWrap::Unpin>("unpin"),
                         InstanceMethod<&BpfLinkWrap::Fd>("fd"),
                     });
}

Napi::Object BpfLinkWrap::New(Napi::Env env, struct bpf_link* link,
                              std::shared_ptr<struct bpf_object> owner, std::string description,
                              bool hasFd) {
  PendingLink pending{link, std::move(owner), std::move(description), hasFd};
  tPending = &pending;
  try {
    Napi::Object obj = GetAddonData(env).linkCtor.New({});
    tPending = nullptr;
    return obj;
  } catch (...) {
    tPending = nullptr;
    if (pending.link) bpf_link__destroy(pending.link);  // not adopted by a JS object
    throw;
  }
}

BpfLinkWrap::BpfLinkWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<BpfLinkWrap>(info) {
  if (!tPending) {
    throw Napi::TypeError::New(info.Env(),
                               "BpfLink cannot be constructed directly: use BpfObject.attach*()");
  }
  link_ = tPending->link;
  owner_ = std::move(tPending->owner);
  description_ = std::move(tPending->description);
  hasFd_ = tPending->hasFd;
  tPending->link = nullptr;
  tPending = nullptr;
}

// Garbage-collected without destroy(): detach, otherwise the attachment would leak for the
// life of the process with nothing left to reach it.
BpfLinkWrap::~BpfLinkWrap() {
  if (link_) bpf_link__destroy(link_);
}

struct bpf_link* BpfLinkWrap::Live(Napi::Env env, const char* op) {
  if (!link_) ThrowState(env, EBADF, std::string(op) + ": link " + description_ + " is destroyed");
  return link_;
}

void BpfLinkWrap::RequireFd(Napi::Env env, const char* op) {
  if (!hasFd_) {
    ThrowState(env, EOPNOTSUPP,
               std::string(op) + ": link " + description_ +
                   " is a set of uprobes with no single BPF link fd");
  }
}

void BpfLinkWrap::Destroy(const Napi::CallbackInfo& info) {
  if (!link_) return;  // idempotent
  uint64_t mark = LogMark();
  int err = bpf_link__destroy(link_);  // frees the link even when detaching reports an error
  link_ = nullptr;
  owner_.reset();
  if (err < 0) ThrowErrno(info.Env(), err, "bpf_link__destroy(" + description_ + ")", mark);
}

void BpfLinkWrap::Pin(const Napi::CallbackInfo& info) {
  struct bpf_link* link = Live(info.Env(), "pin");
  RequireFd(info.Env(), "pin");
  std::string path = ArgString(info, 0, "path");
  uint64_t mark = LogMark();
  int err = bpf_link__pin(link, path.c_str());
  if (err < 0) {
    ThrowErrno(info.Env(), err, "bpf_link__pin(" + description_ + ", '" + path + "')", mark);
  }
}

void BpfLinkWrap::Unpin(const Napi::CallbackInfo& info) {
  struct bpf_link* link = Live(info.Env(), "unpin");
  RequireFd(info.Env(), "unpin");
  uint64_t mark = LogMark();
  int err = bpf_link__unpin(link);
  if (err < 0) ThrowErrno(info.Env(), err, "bpf_link__unpin(" + description_ + ")", mark);
}

Napi::Value BpfLinkWrap::Fd(const Napi::CallbackInfo& info) {
  struct bpf_link* link = Live(info.Env(), "fd");
  RequireFd(info.Env(), "fd");
  int fd = bpf_link__fd(link);
  if (fd < 0) ThrowErrno(info.Env(), fd, "bpf_link__fd(" + description_ + ")");
  return Napi::Number::New(info.Env(), fd);
}

}  // namespace bpfnative
