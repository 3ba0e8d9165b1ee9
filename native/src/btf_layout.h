// Flattening of BTF types into byte-addressed fields, for decoding map keys/values in JS.
#pragma once

#include <bpf/btf.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bpfnative {

struct Field {
  std::string name;            // "outer.inner" for nested members, "" for a plain scalar
  uint32_t offset = 0;         // bytes from the start of the key/value
  uint32_t size = 0;           // bytes
  const char* kind = "other";  // int | array | pointer | enum | other
  bool isSigned = false;
  int64_t count = -1;      // arrays: number of elements
  uint32_t elemSize = 0;   // arrays: element size
  int32_t bitOffset = -1;  // bitfields: bit offset within the byte at `offset`
  int32_t bitSize = -1;    // bitfields: width in bits
};

// Fields of type `typeId` (struct/union members flattened, DATASEC variables listed).
// Returns an empty vector for void; throws std::runtime_error on malformed BTF.
std::vector<Field> FlattenType(const struct btf* btf, uint32_t typeId);

struct DatasecVar {
  std::string name;
  uint32_t offset;
  uint32_t size;
};

// Variables of the DATASEC named `section` (e.g. ".rodata"); empty if there is none.
std::vector<DatasecVar> DatasecVars(const struct btf* btf, const char* section);

}  // namespace bpfnative
