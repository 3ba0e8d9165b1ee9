#include "map_ops.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "errors.h"
#include "libbpf_log.h"

namespace bpfnative {

ByteBlock::ByteBlock(ByteBlock&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

ByteBlock& ByteBlock::operator=(ByteBlock&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

ByteBlock::~ByteBlock() { std::free(data_); }

void ByteBlock::resize(size_t size) {
  if (size > capacity_) {
    size_t capacity = std::max(size, capacity_ * 2);
    void* grown = std::realloc(data_, capacity);
    if (!grown) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(grown);
    capacity_ = capacity;
  }
  size_ = size;
}

void ByteBlock::append(const uint8_t* bytes, size_t n) {
  size_t at = size_;
  resize(size_ + n);
  std::memcpy(data_ + at, bytes, n);
}

uint8_t* ByteBlock::Release() {
  if (size_ == 0) {
    std::free(data_);
    data_ = nullptr;
  } else if (size_ < capacity_) {
    // Shrinking in place never fails to keep the bytes; a failure only leaves the slack.
    if (void* trimmed = std::realloc(data_, size_)) data_ = static_cast<uint8_t*>(trimmed);
  }
  size_ = capacity_ = 0;
  return std::exchange(data_, nullptr);
}

namespace {

constexpr int kENOTSUPP = 524;
constexpr uint32_t kMaxBatch = 1u << 20;

// Errors meaning "this map type has no batch op" rather than a real failure.
bool BatchUnsupported(int err) { return err == EINVAL || err == kENOTSUPP || err == EOPNOTSUPP; }

MapEntries LookupByIteration(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                             const std::string& what) {
  MapEntries out;
  std::vector<uint8_t> cur(keySize), next(keySize), value(valueStride);
  bool first = true;
  for (;;) {
    int err = bpf_map_get_next_key(fd, first ? nullptr : cur.data(), next.data());
    if (err == -ENOENT) break;  // end of map
    if (err < 0) ThrowErrno(env, err, "bpf_map_get_next_key(" + what + ")");
    first = false;
    std::swap(cur, next);
    err = bpf_map_lookup_elem(fd, cur.data(), value.data());
    if (err == -ENOENT) continue;  // deleted between the two calls
    if (err < 0) ThrowErrno(env, err, "bpf_map_lookup_elem(" + what + ")");
    out.keys.append(cur.data(), cur.size());
    out.values.append(value.data(), value.size());
    out.count++;
  }
  return out;
}

}  // namespace

bool IsPerCpuMap(uint32_t mapType) {
  switch (mapType) {
    case BPF_MAP_TYPE_PERCPU_HASH:
    case BPF_MAP_TYPE_PERCPU_ARRAY:
    case BPF_MAP_TYPE_LRU_PERCPU_HASH:
    case BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE:
      return true;
    default:
      return false;
  }
}

uint32_t ValueStride(Napi::Env env, uint32_t mapType, uint32_t valueSize) {
  if (!IsPerCpuMap(mapType)) return valueSize;
  int cpus = libbpf_num_possible_cpus();
  if (cpus < 0) ThrowErrno(env, cpus, "libbpf_num_possible_cpus()");
  return ((valueSize + 7) & ~7u) * static_cast<uint32_t>(cpus);
}

namespace {

// The batch loop of LookupAll and TakeAll: `take` deletes what it returns. Returns false when the
// map type has no such batch op (before anything was read).
bool ReadInBatches(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                   uint32_t batchSize, bool take, const std::string& what, MapEntries& out) {
  const char* op = take ? "bpf_map_lookup_and_delete_batch(" : "bpf_map_lookup_batch(";
  // The batch cursor is a u32 bucket index for hash maps and a key for the generic
  // implementation, so size it for whichever is larger.
  std::vector<uint8_t> inBatch(std::max<uint32_t>(keySize, 8)), outBatch(inBatch.size());
  uint32_t chunk = std::max<uint32_t>(batchSize, 1);
  bool first = true;

  for (;;) {
    out.keys.resize(static_cast<size_t>(out.count + chunk) * keySize);
    out.values.resize(static_cast<size_t>(out.count + chunk) * valueStride);
    uint32_t got = chunk;
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    uint64_t mark = LogMark();
    uint8_t* keysAt = out.keys.data() + static_cast<size_t>(out.count) * keySize;
    uint8_t* valuesAt = out.values.data() + static_cast<size_t>(out.count) * valueStride;
    int err = take ? bpf_map_lookup_and_delete_batch(fd, first ? nullptr : inBatch.data(),
                                                     outBatch.data(), keysAt, valuesAt, &got, &opts)
                   : bpf_map_lookup_batch(fd, first ? nullptr : inBatch.data(), outBatch.data(),
                                          keysAt, valuesAt, &got, &opts);
    err = err < 0 ? -err : 0;
    if (err && err != ENOENT && err != ENOSPC) got = 0;  // count is meaningless on failure
    out.count += got;

    if (err == ENOENT) break;  // end of map; `got` entries of this last chunk are valid
    if (err == ENOSPC && got == 0) {
      // A hash bucket holds more entries than fit in one chunk: retry with a bigger chunk.
      if (chunk >= kMaxBatch) ThrowErrno(env, err, op + what + ")", mark);
      chunk = std::min(chunk * 2, kMaxBatch);
      continue;
    }
    if (err && first && out.count == 0 && BatchUnsupported(err)) return false;
    if (err && err != ENOSPC) ThrowErrno(env, err, op + what + ")", mark);
    first = false;
    std::swap(inBatch, outBatch);
  }
  out.keys.resize(static_cast<size_t>(out.count) * keySize);
  out.values.resize(static_cast<size_t>(out.count) * valueStride);
  return true;
}

}  // namespace

MapEntries LookupAll(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                     uint32_t batchSize, const std::string& what) {
  MapEntries out;
  if (!ReadInBatches(env, fd, keySize, valueStride, batchSize, false, what, out)) {
    return LookupByIteration(env, fd, keySize, valueStride, what);
  }
  return out;
}

MapEntries TakeAll(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                   uint32_t batchSize, const std::string& what) {
  MapEntries out;
  if (!ReadInBatches(env, fd, keySize, valueStride, batchSize, true, what, out)) {
    ThrowErrno(env, -EOPNOTSUPP, "bpf_map_lookup_and_delete_batch(" + what + ")");
  }
  return out;
}

MapEntries LookupKeys(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                      const uint8_t* keys, uint32_t count, const std::string& what) {
  MapEntries out;
  out.keys.resize(static_cast<size_t>(count) * keySize);
  out.values.resize(static_cast<size_t>(count) * valueStride);
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t* key = keys + static_cast<size_t>(i) * keySize;
    uint8_t* value = out.values.data() + static_cast<size_t>(out.count) * valueStride;
    int err = bpf_map_lookup_elem(fd, key, value);
    if (err == -ENOENT) continue;  // deleted since the caller learnt of it
    if (err < 0) ThrowErrno(env, err, "bpf_map_lookup_elem(" + what + ")");
    std::memcpy(out.keys.data() + static_cast<size_t>(out.count) * keySize, key, keySize);
    out.count++;
  }
  out.keys.resize(static_cast<size_t>(out.count) * keySize);
  out.values.resize(static_cast<size_t>(out.count) * valueStride);
  return out;
}

uint32_t DeleteKeys(Napi::Env env, int fd, uint32_t keySize, const uint8_t* keys, uint32_t count,
                    const std::string& what) {
  uint32_t deleted = 0;
  uint32_t pos = 0;
  bool batchOk = true;
  while (pos < count) {
    const uint8_t* key = keys + static_cast<size_t>(pos) * keySize;
    if (batchOk) {
      uint32_t n = count - pos;
      LIBBPF_OPTS(bpf_map_batch_opts, opts);
      int err = bpf_map_delete_batch(fd, key, &n, &opts);
      if (err == 0) {
        deleted += n;
        break;
      }
      if (err == -ENOENT) {
        // The kernel stops at the first missing key: count what went, skip that key.
        deleted += n;
        pos += n + 1;
        continue;
      }
      // Unsupported map types fail before touching any key (and leave `n` as passed).
      if (pos == 0 && BatchUnsupported(-err)) {
        batchOk = false;
        continue;
      }
      ThrowErrno(env, err, "bpf_map_delete_batch(" + what + ")");
    }
    int err = bpf_map_delete_elem(fd, key);
    if (err == 0) deleted++;
    else if (err != -ENOENT) ThrowErrno(env, err, "bpf_map_delete_elem(" + what + ")");
    pos++;
  }
  return deleted;
}

}  // namespace bpfnative
