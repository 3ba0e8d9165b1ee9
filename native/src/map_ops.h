// Whole-map reads and bulk deletes on a map fd, with the fallbacks the kernel makes necessary.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bpfnative {

// Bytes read from a map: grown without zeroing (realloc, which moves a large block by remapping
// it rather than copying), and handed to JavaScript as they are (Release()). A whole read of
// 10,000 per-CPU query values is 4 MB: zeroing, growing and copying it into a new Buffer cost
// as much as the syscalls did.
class ByteBlock {
 public:
  ByteBlock() = default;
  ByteBlock(const ByteBlock&) = delete;
  ByteBlock& operator=(const ByteBlock&) = delete;
  ByteBlock(ByteBlock&& other) noexcept;
  ByteBlock& operator=(ByteBlock&& other) noexcept;
  ~ByteBlock();

  uint8_t* data() { return data_; }
  size_t size() const { return size_; }
  // New bytes are not initialized. Throws std::bad_alloc when memory runs out.
  void resize(size_t size);
  void append(const uint8_t* bytes, size_t n);
  // Gives up the bytes (malloc'd, trimmed to size(); null when empty): the caller frees them.
  uint8_t* Release();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

struct MapEntries {
  ByteBlock keys;    // count * keySize bytes
  ByteBlock values;  // count * valueStride bytes
  uint32_t count = 0;
};

// True for map types whose values are stored once per possible CPU.
bool IsPerCpuMap(uint32_t mapType);

// Bytes one value occupies in user space: value_size, or for per-CPU maps
// roundup(value_size, 8) * libbpf_num_possible_cpus().
uint32_t ValueStride(Napi::Env env, uint32_t mapType, uint32_t valueSize);

// Reads every entry with BPF_MAP_LOOKUP_BATCH (chunks of `batchSize`), falling back to
// get_next_key + lookup when the map type has no batch support. `what` names the map in errors.
MapEntries LookupAll(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                     uint32_t batchSize, const std::string& what);

// Reads and deletes every entry with BPF_MAP_LOOKUP_AND_DELETE_BATCH: an entry added meanwhile
// is either returned or left for the next call, never lost. Throws EOPNOTSUPP where the map
// type has no such batch op (no fallback could keep that promise).
MapEntries TakeAll(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                   uint32_t batchSize, const std::string& what);

// The entries of `count` packed keys, one lookup each; keys that are absent are left out.
MapEntries LookupKeys(Napi::Env env, int fd, uint32_t keySize, uint32_t valueStride,
                      const uint8_t* keys, uint32_t count, const std::string& what);

// Deletes `count` keys with BPF_MAP_DELETE_BATCH (per-key fallback); keys that are already
// gone are skipped. Returns how many were deleted.
uint32_t DeleteKeys(Napi::Env env, int fd, uint32_t keySize, const uint8_t* keys, uint32_t count,
                    const std::string& what);

}  // namespace bpfnative
