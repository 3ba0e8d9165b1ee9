#include "bpf_object_wrap.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "args.h"
#include "bpf_link_wrap.h"
#include "btf_layout.h"
#include "errors.h"
#include "libbpf_log.h"
#include "map_ops.h"

namespace bpfnative {

namespace {

constexpr size_t kLoadLogTail = 40;  // verifier log lines quoted in a load failure
constexpr uint32_t kDefaultBatch = 256;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string ProgSubject(struct bpf_program* prog) {
  return "prog " + Quote(bpf_program__name(prog));
}

std::string MapSubject(struct bpf_map* map) { return "map " + Quote(bpf_map__name(map)); }

Napi::Buffer<uint8_t> CopyBuffer(Napi::Env env, const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) return Napi::Buffer<uint8_t>::New(env, 0);
  return Napi::Buffer<uint8_t>::Copy(env, bytes.data(), bytes.size());
}

Napi::Array FieldsToJs(Napi::Env env, const std::vector<Field>& fields) {
  Napi::Array arr = Napi::Array::New(env, fields.size());
  for (size_t i = 0; i < fields.size(); i++) {
    const Field& f = fields[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", f.name);
    o.Set("offset", f.offset);
    o.Set("size", f.size);
    o.Set("kind", f.kind);
    o.Set("signed", f.isSigned);
    if (f.count >= 0) {
      o.Set("count", Napi::Number::New(env, static_cast<double>(f.count)));
      o.Set("elemSize", f.elemSize);
    }
    if (f.bitSize >= 0) {
      o.Set("bitOffset", f.bitOffset);
      o.Set("bitSize", f.bitSize);
    }
    arr.Set(i, o);
  }
  return arr;
}

// Key or value layout of a map: from BTF when the map has a type id, otherwise one opaque field.
std::vector<Field> LayoutOf(Napi::Env env, const struct btf* btf, uint32_t typeId, uint32_t size,
                            const std::string& what) {
  if (btf && typeId) {
    try {
      return FlattenType(btf, typeId);
    } catch (const std::runtime_error& e) {
      ThrowState(env, EINVAL, "mapLayout(" + what + "): " + e.what());
    }
  }
  std::vector<Field> out;
  if (size > 0) {
    Field f;
    f.size = size;
    out.push_back(f);
  }
  return out;
}

int PerfEventOpen(struct perf_event_attr* attr, int pid, int cpu) {
  return static_cast<int>(syscall(__NR_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

std::optional<uint64_t> OptU64(Napi::Env env, Napi::Object o, const char* key) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return std::nullopt;
  return ToU64(env, v, key);
}

}  // namespace

Napi::Function BpfObjectWrap::Define(Napi::Env env) {
  return DefineClass(
      env, "BpfObject",
      {
          InstanceMethod<&BpfObjectWrap::Programs>("programs"),
          InstanceMethod<&BpfObjectWrap::Maps>("maps"),
          InstanceMethod<&BpfObjectWrap::SetAutoload>("setAutoload"),
          InstanceMethod<&BpfObjectWrap::SetMaxEntries>("setMaxEntries"),
          InstanceMethod<&BpfObjectWrap::SetAttachTarget>("setAttachTarget"),
          InstanceMethod<&BpfObjectWrap::ReuseMapFd>("reuseMapFd"),
          InstanceMethod<&BpfObjectWrap::Rodata>("rodata"),
          InstanceMethod<&BpfObjectWrap::SetRodata>("setRodata"),
          InstanceMethod<&BpfObjectWrap::ReadBss>("readBss"),
          InstanceMethod<&BpfObjectWrap::WriteBss>("writeBss"),
          InstanceMethod<&BpfObjectWrap::Load>("load"),
          InstanceMethod<&BpfObjectWrap::Close>("close"),
          InstanceMethod<&BpfObjectWrap::Attach>("attach"),
          InstanceMethod<&BpfObjectWrap::AttachTracepoint>("attachTracepoint"),
          InstanceMethod<&BpfObjectWrap::AttachRawTracepoint>("attachRawTracepoint"),
          InstanceMethod<&BpfObjectWrap::AttachUsdt>("attachUsdt"),
          InstanceMethod<&BpfObjectWrap::AttachUprobe>("attachUprobe"),
          InstanceMethod<&BpfObjectWrap::AttachPerfEvent>("attachPerfEvent"),
          InstanceMethod<&BpfObjectWrap::MapLayout>("mapLayout"),
          InstanceMethod<&BpfObjectWrap::MapLookup>("mapLookup"),
          InstanceMethod<&BpfObjectWrap::MapUpdate>("mapUpdate"),
          InstanceMethod<&BpfObjectWrap::MapDelete>("mapDelete"),
          InstanceMethod<&BpfObjectWrap::MapLookupAndDelete>("mapLookupAndDelete"),
          InstanceMethod<&BpfObjectWrap::MapLookupBatch>("mapLookupBatch"),
          InstanceMethod<&BpfObjectWrap::MapLookupAndDeleteBatch>("mapLookupAndDeleteBatch"),
          InstanceMethod<&BpfObjectWrap::MapLookupKeys>("mapLookupKeys"),
          InstanceMethod<&BpfObjectWrap::MapDeleteBatch>("mapDeleteBatch"),
          InstanceMethod<&BpfObjectWrap::MapFd>("mapFd"),
          InstanceMethod<&BpfObjectWrap::PinMap>("pinMap"),
          InstanceMethod<&BpfObjectWrap::UnpinMap>("unpinMap"),
      });
}

BpfObjectWrap::BpfObjectWrap(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<BpfObjectWrap>(info) {
  path_ = ArgString(info, 0, "path");
  uint64_t mark = LogMark();
  struct bpf_object* obj = bpf_object__open_file(path_.c_str(), nullptr);
  int err = errno;
  if (!obj) ThrowErrno(info.Env(), err, "bpf_object__open_file(" + Quote(path_) + ")", mark);
  obj_ = std::shared_ptr<struct bpf_object>(obj, bpf_object__close);
}

struct bpf_object* BpfObjectWrap::Obj(Napi::Env env) {
  if (!obj_) ThrowState(env, EBADF, "BpfObject(" + Quote(path_) + ") is closed");
  return obj_.get();
}

struct bpf_program* BpfObjectWrap::Prog(const Napi::CallbackInfo& info, size_t argIndex) {
  struct bpf_object* obj = Obj(info.Env());
  std::string name = ArgString(info, argIndex, "prog");
  struct bpf_program* prog = bpf_object__find_program_by_name(obj, name.c_str());
  if (!prog) ThrowState(info.Env(), ENOENT, "program " + Quote(name) + " not found in " + path_);
  return prog;
}

struct bpf_map* BpfObjectWrap::Map(const Napi::CallbackInfo& info, size_t argIndex) {
  struct bpf_object* obj = Obj(info.Env());
  std::string name = ArgString(info, argIndex, "map");
  struct bpf_map* map = bpf_object__find_map_by_name(obj, name.c_str());
  if (!map) ThrowState(info.Env(), ENOENT, "map " + Quote(name) + " not found in " + path_);
  return map;
}

void BpfObjectWrap::RequireNotLoaded(Napi::Env env, const char* op) {
  Obj(env);
  if (loaded_)
    ThrowState(env, EBUSY, std::string(op) + ": BpfObject(" + Quote(path_) + ") is already loaded");
}

Napi::Value BpfObjectWrap::WrapLink(Napi::Env env, struct bpf_link* link, int err, uint64_t logMark,
                                    const std::string& call, const std::string& subject,
                                    bool hasFd) {
  if (!link) ThrowErrno(env, err, call + "(" + subject + ")", logMark);
  return BpfLinkWrap::New(env, link, obj_, subject, hasFd);
}

// ---- introspection and configuration ----

Napi::Value BpfObjectWrap::Programs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_object* obj = Obj(env);
  Napi::Array arr = Napi::Array::New(env);
  uint32_t i = 0;
  struct bpf_program* prog;
  bpf_object__for_each_program(prog, obj) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", bpf_program__name(prog));
    o.Set("section", bpf_program__section_name(prog));
    o.Set("type", static_cast<uint32_t>(bpf_program__type(prog)));
    o.Set("autoload", bpf_program__autoload(prog));
    arr.Set(i++, o);
  }
  return arr;
}

Napi::Value BpfObjectWrap::Maps(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_object* obj = Obj(env);
  Napi::Array arr = Napi::Array::New(env);
  uint32_t i = 0;
  struct bpf_map* map;
  bpf_object__for_each_map(map, obj) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", bpf_map__name(map));
    o.Set("type", static_cast<uint32_t>(bpf_map__type(map)));
    o.Set("keySize", bpf_map__key_size(map));
    o.Set("valueSize", bpf_map__value_size(map));
    o.Set("maxEntries", bpf_map__max_entries(map));
    arr.Set(i++, o);
  }
  return arr;
}

void BpfObjectWrap::SetAutoload(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  bool on = ArgBool(info, 1, "on");
  RequireNotLoaded(info.Env(), "setAutoload");
  int err = bpf_program__set_autoload(prog, on);
  if (err < 0) ThrowErrno(info.Env(), err, "bpf_program__set_autoload(" + ProgSubject(prog) + ")");
}

void BpfObjectWrap::SetMaxEntries(const Napi::CallbackInfo& info) {
  struct bpf_map* map = Map(info, 0);
  uint32_t n = ArgUint32(info, 1, "n");
  RequireNotLoaded(info.Env(), "setMaxEntries");
  uint64_t mark = LogMark();
  int err = bpf_map__set_max_entries(map, n);
  if (err < 0) {
    ThrowErrno(info.Env(), err,
               "bpf_map__set_max_entries(" + MapSubject(map) + ", " + std::to_string(n) + ")",
               mark);
  }
}

// Another attach target than the section names (for tp_btf: another tracepoint, whose BTF
// prototype the verifier then checks the program's argument accesses against).
void BpfObjectWrap::SetAttachTarget(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  std::string target = ArgString(info, 1, "target");
  RequireNotLoaded(info.Env(), "setAttachTarget");
  uint64_t mark = LogMark();
  int err = bpf_program__set_attach_target(prog, 0, target.c_str());
  if (err < 0) {
    ThrowErrno(info.Env(), err,
               "bpf_program__set_attach_target(" + ProgSubject(prog) + ", " + Quote(target) + ")",
               mark);
  }
}

void BpfObjectWrap::ReuseMapFd(const Napi::CallbackInfo& info) {
  struct bpf_map* map = Map(info, 0);
  int fd = ArgInt32(info, 1, "fd");
  RequireNotLoaded(info.Env(), "reuseMapFd");
  uint64_t mark = LogMark();
  // libbpf dups the fd: the caller's object may close its own later.
  int err = bpf_map__reuse_fd(map, fd);
  if (err < 0) {
    ThrowErrno(info.Env(), err,
               "bpf_map__reuse_fd(" + MapSubject(map) + ", " + std::to_string(fd) + ")", mark);
  }
}

Napi::Value BpfObjectWrap::Rodata(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  // libbpf fixes up DATASEC offsets/sizes at open time, so they are final here.
  auto vars = DatasecVars(bpf_object__btf(Obj(env)), ".rodata");
  Napi::Array arr = Napi::Array::New(env, vars.size());
  for (size_t i = 0; i < vars.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", vars[i].name);
    o.Set("offset", vars[i].offset);
    o.Set("size", vars[i].size);
    arr.Set(i, o);
  }
  return arr;
}

BpfObjectWrap::MappedBss::~MappedBss() {
  if (addr) munmap(addr, length);
}

// libbpf creates .bss with BPF_F_MMAPABLE, so its memory can be mapped: a read is then a copy
// from the memory the programs write, without a syscall (the postmaster follower reads a
// global every second, every 100 ms while a restart may be under way), and a write changes
// only the variable written, where a map update rewrites the whole section over what the
// programs wrote meanwhile. libbpf 1.1 maps it itself only for skeletons, so it is mapped
// here, from the map's fd, once. Returns the bytes [offset, offset + length).
uint8_t* BpfObjectWrap::BssBytes(Napi::Env env, const char* what, uint64_t offset, size_t length) {
  struct bpf_map* map = bpf_object__find_map_by_name(Obj(env), ".bss");
  if (!map) ThrowState(env, ENOENT, std::string(what) + ": " + path_ + " has no .bss section");
  if (!loaded_ || bpf_map__fd(map) < 0)
    ThrowState(env, EINVAL, std::string(what) + ": BpfObject(" + Quote(path_) + ") is not loaded");
  if (!bss_) {
    auto mapped = std::make_unique<MappedBss>();
    mapped->size = bpf_map__value_size(map);
    long page = sysconf(_SC_PAGESIZE);
    mapped->length = (mapped->size + page - 1) / page * page;
    void* addr =
        mmap(nullptr, mapped->length, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(map), 0);
    if (addr == MAP_FAILED)
      ThrowErrno(env, -errno, "mmap(.bss of " + Quote(path_) + ")", LogMark());
    mapped->addr = addr;
    bss_ = std::move(mapped);
  }
  size_t size = bss_->size;
  if (offset > size || length > size - offset) {
    ThrowState(env, ERANGE,
               std::string(what) + ": [" + std::to_string(offset) + ", " +
                   std::to_string(offset + length) + ") out of range of .bss (size " +
                   std::to_string(size) + ")");
  }
  return static_cast<uint8_t*>(bss_->addr) + offset;
}

void BpfObjectWrap::ReadBss(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t offset = ArgSize(info, 0, "offset");
  Napi::Buffer<uint8_t> into = ArgBuffer(info, 1, "into");
  std::memcpy(into.Data(), BssBytes(env, "readBss", offset, into.Length()), into.Length());
}

// An aligned 4- or 8-byte variable is stored in one instruction, so a program never reads half
// of it; other lengths are copied.
void BpfObjectWrap::WriteBss(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t offset = ArgSize(info, 0, "offset");
  Napi::Buffer<uint8_t> from = ArgBuffer(info, 1, "from");
  uint8_t* at = BssBytes(env, "writeBss", offset, from.Length());
  if (from.Length() == 8 && offset % 8 == 0) {
    uint64_t v;
    std::memcpy(&v, from.Data(), 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(at), v, __ATOMIC_RELEASE);
  } else if (from.Length() == 4 && offset % 4 == 0) {
    uint32_t v;
    std::memcpy(&v, from.Data(), 4);
    __atomic_store_n(reinterpret_cast<uint32_t*>(at), v, __ATOMIC_RELEASE);
  } else {
    std::memcpy(at, from.Data(), from.Length());
  }
}

void BpfObjectWrap::SetRodata(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t offset = ArgSize(info, 0, "offset");
  Napi::Buffer<uint8_t> bytes = ArgBuffer(info, 1, "bytes");
  RequireNotLoaded(env, "setRodata");

  struct bpf_map* map = bpf_object__find_map_by_name(Obj(env), ".rodata");
  if (!map) ThrowState(env, ENOENT, "setRodata: " + path_ + " has no .rodata section");
  size_t size = 0;
  const void* current = bpf_map__initial_value(map, &size);
  if (!current) ThrowState(env, ENOENT, "setRodata: .rodata of " + path_ + " has no initial value");
  if (offset > size || bytes.Length() > size - offset) {
    ThrowState(env, ERANGE,
               "setRodata: bytes [" + std::to_string(offset) + ", " +
                   std::to_string(offset + bytes.Length()) + ") out of range of .rodata (size " +
                   std::to_string(size) + ")");
  }
  // Patch a copy and hand it back through the public setter rather than writing through the
  // const pointer libbpf returns.
  std::vector<uint8_t> image(static_cast<const uint8_t*>(current),
                             static_cast<const uint8_t*>(current) + size);
  if (bytes.Length() > 0) std::memcpy(image.data() + offset, bytes.Data(), bytes.Length());
  uint64_t mark = LogMark();
  int err = bpf_map__set_initial_value(map, image.data(), image.size());
  if (err < 0) ThrowErrno(env, err, "bpf_map__set_initial_value(" + MapSubject(map) + ")", mark);
}

void BpfObjectWrap::Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireNotLoaded(env, "load");
  loaded_ = true;  // libbpf does not allow a second load, even after a failure
  uint64_t mark = LogMark();
  int err = bpf_object__load(Obj(env));
  if (err < 0) ThrowErrno(env, err, "bpf_object__load(" + Quote(path_) + ")", mark, kLoadLogTail);
}

void BpfObjectWrap::Close(const Napi::CallbackInfo& info) {
  bss_.reset();
  obj_.reset();  // bpf_object__close() once no BpfLink holds it any more
}

// ---- attachment ----

Napi::Value BpfObjectWrap::Attach(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  uint64_t mark = LogMark();
  struct bpf_link* link = bpf_program__attach(prog);
  int err = errno;
  const char* section = bpf_program__section_name(prog);
  bool isUsdt = std::strncmp(section, "usdt", 4) == 0;  // composite link, see BpfLinkWrap::New
  return WrapLink(info.Env(), link, err, mark, "bpf_program__attach",
                  ProgSubject(prog) + ", section " + Quote(section), !isUsdt);
}

Napi::Value BpfObjectWrap::AttachTracepoint(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  std::string category = ArgString(info, 1, "category");
  std::string name = ArgString(info, 2, "name");
  uint64_t mark = LogMark();
  struct bpf_link* link = bpf_program__attach_tracepoint(prog, category.c_str(), name.c_str());
  int err = errno;
  return WrapLink(info.Env(), link, err, mark, "bpf_program__attach_tracepoint",
                  ProgSubject(prog) + ", tracepoint " + Quote(category + "/" + name));
}

Napi::Value BpfObjectWrap::AttachRawTracepoint(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  std::string name = ArgString(info, 1, "name");
  uint64_t mark = LogMark();
  struct bpf_link* link = bpf_program__attach_raw_tracepoint(prog, name.c_str());
  int err = errno;
  return WrapLink(info.Env(), link, err, mark, "bpf_program__attach_raw_tracepoint",
                  ProgSubject(prog) + ", raw tracepoint " + Quote(name));
}

Napi::Value BpfObjectWrap::AttachUsdt(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_program* prog = Prog(info, 0);
  int32_t pid = ArgInt32(info, 1, "pid");
  std::string binary = ArgString(info, 2, "binaryPath");
  std::string provider = ArgString(info, 3, "provider");
  std::string name = ArgString(info, 4, "name");
  LIBBPF_OPTS(bpf_usdt_opts, opts);
  if (info.Length() > 5 && !info[5].IsUndefined() && !info[5].IsNull()) {
    opts.usdt_cookie = ToU64(env, info[5], "cookie");
  }
  uint64_t mark = LogMark();
  struct bpf_link* link =
      bpf_program__attach_usdt(prog, pid, binary.c_str(), provider.c_str(), name.c_str(), &opts);
  int err = errno;
  return WrapLink(env, link, err, mark, "bpf_program__attach_usdt",
                  ProgSubject(prog) + ", usdt " + Quote(provider + ":" + name) + " in " + binary +
                      ", pid " + std::to_string(pid),
                  /*hasFd=*/false);
}

Napi::Value BpfObjectWrap::AttachUprobe(const Napi::CallbackInfo& info) {
  struct bpf_program* prog = Prog(info, 0);
  bool retprobe = ArgBool(info, 1, "retprobe");
  int32_t pid = ArgInt32(info, 2, "pid");
  std::string binary = ArgString(info, 3, "binaryPath");
  std::optional<std::string> func = ArgOptString(info, 4, "funcName");
  uint64_t offset = ArgSize(info, 5, "offset");
  LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe,
              .func_name = func ? func->c_str() : nullptr);
  uint64_t mark = LogMark();
  struct bpf_link* link = bpf_program__attach_uprobe_opts(prog, pid, binary.c_str(), offset, &opts);
  int err = errno;
  std::string where = (func ? *func : std::string("<no symbol>")) + "+" + std::to_string(offset);
  return WrapLink(info.Env(), link, err, mark, "bpf_program__attach_uprobe_opts",
                  ProgSubject(prog) + (retprobe ? ", uretprobe " : ", uprobe ") + where + " in " +
                      binary + ", pid " + std::to_string(pid));
}

Napi::Value BpfObjectWrap::AttachPerfEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_program* prog = Prog(info, 0);
  if (info.Length() < 2 || !info[1].IsObject()) {
    throw Napi::TypeError::New(env, "opts must be an object");
  }
  Napi::Object o = info[1].As<Napi::Object>();
  uint64_t type = ToU64(env, o.Get("type"), "opts.type");
  uint64_t config = ToU64(env, o.Get("config"), "opts.config");
  std::optional<uint64_t> period = OptU64(env, o, "samplePeriod");
  std::optional<uint64_t> freq = OptU64(env, o, "sampleFreq");
  int32_t cpu = ToInt32(env, o.Get("cpu"), "opts.cpu");
  Napi::Value pidValue = o.Get("pid");
  int32_t pid =
      pidValue.IsUndefined() || pidValue.IsNull() ? -1 : ToInt32(env, pidValue, "opts.pid");
  if (type > UINT32_MAX) throw Napi::TypeError::New(env, "opts.type must be a uint32");
  if (period && freq) {
    throw Napi::TypeError::New(env, "opts.samplePeriod and opts.sampleFreq are exclusive");
  }

  struct perf_event_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = static_cast<uint32_t>(type);
  attr.config = config;
  if (freq) {
    attr.freq = 1;
    attr.sample_freq = *freq;
  } else if (period) {
    attr.sample_period = *period;
  }
  std::string subject = ProgSubject(prog) + ", perf_event type " + std::to_string(type) +
                        " config " + std::to_string(config) + " cpu " + std::to_string(cpu) +
                        " pid " + std::to_string(pid);
  int pfd = PerfEventOpen(&attr, pid, cpu);
  if (pfd < 0) {
    int err = errno;
    ThrowErrno(env, err, "perf_event_open(" + subject + ")");
  }

  uint64_t mark = LogMark();
  struct bpf_link* link = bpf_program__attach_perf_event(prog, pfd);
  int err = errno;
  if (!link) close(pfd);  // on success the link owns pfd and closes it on destroy
  return WrapLink(env, link, err, mark, "bpf_program__attach_perf_event", subject);
}

// ---- maps ----

Napi::Value BpfObjectWrap::MapLayout(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  const struct btf* btf = bpf_object__btf(Obj(env));
  uint32_t valueType = bpf_map__btf_value_type_id(map);
  if (btf && valueType == 0 && bpf_map__is_internal(map)) {
    // Global-data maps get their DATASEC type id only at load; look it up by section name
    // (the map name is "<obj prefix>.rodata", the section ".rodata").
    const char* dot = std::strchr(bpf_map__name(map), '.');
    int id = dot ? btf__find_by_name_kind(btf, dot, BTF_KIND_DATASEC) : -ENOENT;
    if (id > 0) valueType = static_cast<uint32_t>(id);
  }
  std::string what = MapSubject(map);
  Napi::Object out = Napi::Object::New(env);
  out.Set("key", FieldsToJs(env, LayoutOf(env, btf, bpf_map__btf_key_type_id(map),
                                          bpf_map__key_size(map), what)));
  out.Set("value", FieldsToJs(env, LayoutOf(env, btf, valueType, bpf_map__value_size(map), what)));
  return out;
}

namespace {
// A MapBatch (src/native/bpf-native.ts) of `entries`.
// The block's bytes as a Buffer that owns them (freed when it is collected): no copy.
Napi::Buffer<uint8_t> OwningBuffer(Napi::Env env, ByteBlock& block) {
  size_t size = block.size();
  uint8_t* bytes = block.Release();
  if (!bytes) return Napi::Buffer<uint8_t>::New(env, 0);
  return Napi::Buffer<uint8_t>::New(env, bytes, size,
                                    [](Napi::Env, uint8_t* data) { std::free(data); });
}

Napi::Object BatchToJs(Napi::Env env, MapEntries& entries, uint32_t keySize, uint32_t stride) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("keys", OwningBuffer(env, entries.keys));
  out.Set("values", OwningBuffer(env, entries.values));
  out.Set("count", entries.count);
  out.Set("keySize", keySize);
  out.Set("valueSize", stride);
  return out;
}

int LoadedMapFd(Napi::Env env, struct bpf_map* map, const char* op) {
  int fd = bpf_map__fd(map);
  if (fd < 0) {
    ThrowState(env, EBADF, std::string(op) + ": " + MapSubject(map) + " has no fd (not loaded)");
  }
  return fd;
}
}  // namespace

Napi::Value BpfObjectWrap::MapLookup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  Napi::Buffer<uint8_t> key = ArgBuffer(info, 1, "key");
  LoadedMapFd(env, map, "mapLookup");  // libbpf reports a missing fd as ENOENT, like a miss
  std::vector<uint8_t> value(ValueStride(env, bpf_map__type(map), bpf_map__value_size(map)));
  uint64_t mark = LogMark();
  int err = bpf_map__lookup_elem(map, key.Data(), key.Length(), value.data(), value.size(), 0);
  if (err == -ENOENT) return env.Null();
  if (err < 0) ThrowErrno(env, err, "bpf_map__lookup_elem(" + MapSubject(map) + ")", mark);
  return CopyBuffer(env, value);
}

void BpfObjectWrap::MapUpdate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  Napi::Buffer<uint8_t> key = ArgBuffer(info, 1, "key");
  Napi::Buffer<uint8_t> value = ArgBuffer(info, 2, "value");
  uint64_t flags = 0;
  if (info.Length() > 3 && !info[3].IsUndefined()) flags = ToU64(env, info[3], "flags");
  LoadedMapFd(env, map, "mapUpdate");
  uint64_t mark = LogMark();
  int err =
      bpf_map__update_elem(map, key.Data(), key.Length(), value.Data(), value.Length(), flags);
  if (err < 0) ThrowErrno(env, err, "bpf_map__update_elem(" + MapSubject(map) + ")", mark);
}

Napi::Value BpfObjectWrap::MapDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  Napi::Buffer<uint8_t> key = ArgBuffer(info, 1, "key");
  LoadedMapFd(env, map, "mapDelete");
  uint64_t mark = LogMark();
  int err = bpf_map__delete_elem(map, key.Data(), key.Length(), 0);
  if (err == -ENOENT) return Napi::Boolean::New(env, false);
  if (err < 0) ThrowErrno(env, err, "bpf_map__delete_elem(" + MapSubject(map) + ")", mark);
  return Napi::Boolean::New(env, true);
}

// One syscall: the value the key had at the moment it was deleted, so an increment made by a
// program between a reader's lookup and its delete is returned here instead of lost.
Napi::Value BpfObjectWrap::MapLookupAndDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  Napi::Buffer<uint8_t> key = ArgBuffer(info, 1, "key");
  LoadedMapFd(env, map, "mapLookupAndDelete");
  std::vector<uint8_t> value(ValueStride(env, bpf_map__type(map), bpf_map__value_size(map)));
  uint64_t mark = LogMark();
  int err =
      bpf_map__lookup_and_delete_elem(map, key.Data(), key.Length(), value.data(), value.size(), 0);
  if (err == -ENOENT) return env.Null();
  if (err < 0)
    ThrowErrno(env, err, "bpf_map__lookup_and_delete_elem(" + MapSubject(map) + ")", mark);
  return CopyBuffer(env, value);
}

// mapLookupBatch and mapLookupAndDeleteBatch: (map, batchSize?) -> MapBatch of every entry;
// `take` deletes what it returns.
Napi::Value BpfObjectWrap::WholeMap(const Napi::CallbackInfo& info, bool take) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  uint32_t batch = kDefaultBatch;
  if (info.Length() > 1 && !info[1].IsUndefined()) batch = ArgUint32(info, 1, "batchSize");
  if (batch == 0) throw Napi::TypeError::New(env, "batchSize must be > 0");
  int fd = LoadedMapFd(env, map, take ? "mapLookupAndDeleteBatch" : "mapLookupBatch");
  uint32_t keySize = bpf_map__key_size(map);
  uint32_t stride = ValueStride(env, bpf_map__type(map), bpf_map__value_size(map));
  MapEntries entries = take ? TakeAll(env, fd, keySize, stride, batch, MapSubject(map))
                            : LookupAll(env, fd, keySize, stride, batch, MapSubject(map));
  return BatchToJs(env, entries, keySize, stride);
}

Napi::Value BpfObjectWrap::MapLookupBatch(const Napi::CallbackInfo& info) {
  return WholeMap(info, false);
}

Napi::Value BpfObjectWrap::MapLookupAndDeleteBatch(const Napi::CallbackInfo& info) {
  return WholeMap(info, true);
}

namespace {
// The (keys, count) arguments of a call on packed keys (keySize bytes each), checked.
struct PackedKeys {
  Napi::Buffer<uint8_t> buffer;
  uint32_t count;
  uint32_t keySize;
};

PackedKeys PackedKeysArg(const Napi::CallbackInfo& info, struct bpf_map* map, const char* op) {
  PackedKeys keys{ArgBuffer(info, 1, "keys"), ArgUint32(info, 2, "count"), bpf_map__key_size(map)};
  if (static_cast<uint64_t>(keys.count) * keys.keySize > keys.buffer.Length()) {
    ThrowState(info.Env(), ERANGE,
               std::string(op) + "(" + MapSubject(map) + "): " + std::to_string(keys.count) +
                   " keys of " + std::to_string(keys.keySize) + " bytes need more than the " +
                   std::to_string(keys.buffer.Length()) + " bytes given");
  }
  return keys;
}
}  // namespace

Napi::Value BpfObjectWrap::MapLookupKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  PackedKeys keys = PackedKeysArg(info, map, "mapLookupKeys");
  int fd = LoadedMapFd(env, map, "mapLookupKeys");
  uint32_t stride = ValueStride(env, bpf_map__type(map), bpf_map__value_size(map));
  MapEntries entries =
      LookupKeys(env, fd, keys.keySize, stride, keys.buffer.Data(), keys.count, MapSubject(map));
  return BatchToJs(env, entries, keys.keySize, stride);
}

Napi::Value BpfObjectWrap::MapDeleteBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct bpf_map* map = Map(info, 0);
  PackedKeys keys = PackedKeysArg(info, map, "mapDeleteBatch");
  int fd = LoadedMapFd(env, map, "mapDeleteBatch");
  if (keys.count == 0) return Napi::Number::New(env, 0);
  return Napi::Number::New(
      env, DeleteKeys(env, fd, keys.keySize, keys.buffer.Data(), keys.count, MapSubject(map)));
}

Napi::Value BpfObjectWrap::MapFd(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), LoadedMapFd(info.Env(), Map(info, 0), "mapFd"));
}

void BpfObjectWrap::PinMap(const Napi::CallbackInfo& info) {
  struct bpf_map* map = Map(info, 0);
  std::string path = ArgString(info, 1, "path");
  uint64_t mark = LogMark();
  int err = bpf_map__pin(map, path.c_str());
  if (err < 0) {
    ThrowErrno(info.Env(), err, "bpf_map__pin(" + MapSubject(map) + ", " + Quote(path) + ")", mark);
  }
}

void BpfObjectWrap::UnpinMap(const Napi::CallbackInfo& info) {
  struct bpf_map* map = Map(info, 0);
  std::optional<std::string> path = ArgOptString(info, 1, "path");
  uint64_t mark = LogMark();
  int err = bpf_map__unpin(map, path ? path->c_str() : nullptr);
  if (err < 0) {
    ThrowErrno(
        info.Env(), err,
        "bpf_map__unpin(" + MapSubject(map) + ", " + Quote(path.value_or("<pin path>")) + ")",
        mark);
  }
}

}  // namespace bpfnative
