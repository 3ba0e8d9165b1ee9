#include "btf_layout.h"

#include <stdexcept>

namespace bpfnative {
namespace {

constexpr int kMaxDepth = 32;

const struct btf_type* TypeAt(const struct btf* btf, uint32_t id) {
  const struct btf_type* t = btf__type_by_id(btf, id);
  if (!t) throw std::runtime_error("BTF type id " + std::to_string(id) + " not found");
  return t;
}

// Strips typedef/const/volatile/restrict/type_tag (and VAR). Void stays void (id 0).
uint32_t Resolve(const struct btf* btf, uint32_t id) {
  if (id == 0) return 0;
  int r = btf__resolve_type(btf, id);
  return r < 0 ? 0 : static_cast<uint32_t>(r);  // -EINVAL: resolves to void
}

std::string Join(const std::string& prefix, const char* name) {
  if (!name || !*name) return prefix;  // anonymous member: its fields belong to the parent
  return prefix.empty() ? std::string(name) : prefix + "." + name;
}

uint32_t SizeOf(const struct btf* btf, uint32_t id) {
  long long s = btf__resolve_size(btf, id);
  return s < 0 ? 0 : static_cast<uint32_t>(s);
}

void Leaf(const struct btf* btf, uint32_t id, const std::string& name, uint32_t bitBase,
          std::vector<Field>& out) {
  Field f;
  f.name = name;
  f.offset = bitBase / 8;
  uint32_t rid = Resolve(btf, id);
  if (rid == 0) {  // void: nothing to decode
    f.size = 0;
    out.push_back(f);
    return;
  }
  const struct btf_type* t = TypeAt(btf, rid);
  f.size = SizeOf(btf, rid);
  if (btf_is_int(t)) {
    f.kind = "int";
    f.isSigned = btf_int_encoding(t) & BTF_INT_SIGNED;
  } else if (btf_is_any_enum(t)) {
    f.kind = "enum";
    f.isSigned = btf_kflag(t);  // kflag marks signed enums
  } else if (btf_is_ptr(t)) {
    f.kind = "pointer";
  } else if (btf_is_array(t)) {
    const struct btf_array* arr = btf_array(t);
    uint32_t eid = Resolve(btf, arr->type);
    f.count = arr->nelems;
    f.elemSize = SizeOf(btf, arr->type);
    if (eid != 0 && btf_is_int(TypeAt(btf, eid))) {
      f.kind = "array";
      f.isSigned = btf_int_encoding(TypeAt(btf, eid)) & BTF_INT_SIGNED;
    }
  }
  out.push_back(f);
}

void Walk(const struct btf* btf, uint32_t id, const std::string& name, uint32_t bitBase,
          std::vector<Field>& out, int depth) {
  if (depth > kMaxDepth) throw std::runtime_error("BTF type nesting too deep");
  uint32_t rid = Resolve(btf, id);
  const struct btf_type* t = rid ? TypeAt(btf, rid) : nullptr;

  if (t && btf_is_composite(t)) {
    const struct btf_member* m = btf_members(t);
    for (uint16_t i = 0; i < btf_vlen(t); i++, m++) {
      std::string child = Join(name, btf__name_by_offset(btf, m->name_off));
      uint32_t bitOff = bitBase + btf_member_bit_offset(t, i);
      uint32_t bits = btf_member_bitfield_size(t, i);
      if (bits == 0 && bitOff % 8 == 0) {
        Walk(btf, m->type, child, bitOff, out, depth + 1);
        continue;
      }
      // Bitfield: report the bytes that hold it; JS decodes with bitOffset/bitSize.
      Field f;
      f.name = child;
      f.offset = bitOff / 8;
      f.bitOffset = static_cast<int32_t>(bitOff % 8);
      f.bitSize = static_cast<int32_t>(bits ? bits : SizeOf(btf, m->type) * 8);
      f.size = (static_cast<uint32_t>(f.bitOffset) + f.bitSize + 7) / 8;
      out.push_back(f);
    }
    return;
  }
  if (t && btf_is_datasec(t)) {
    const struct btf_var_secinfo* v = btf_var_secinfos(t);
    for (uint16_t i = 0; i < btf_vlen(t); i++, v++) {
      const struct btf_type* var = TypeAt(btf, v->type);
      Walk(btf, v->type, Join(name, btf__name_by_offset(btf, var->name_off)),
           bitBase + v->offset * 8, out, depth + 1);
    }
    return;
  }
  Leaf(btf, id, name, bitBase, out);
}

}  // namespace

std::vector<Field> FlattenType(const struct btf* btf, uint32_t typeId) {
  std::vector<Field> out;
  if (typeId != 0) Walk(btf, typeId, "", 0, out, 0);
  return out;
}

std::vector<DatasecVar> DatasecVars(const struct btf* btf, const char* section) {
  std::vector<DatasecVar> out;
  if (!btf) return out;
  int id = btf__find_by_name_kind(btf, section, BTF_KIND_DATASEC);
  if (id < 0) return out;
  const struct btf_type* sec = TypeAt(btf, static_cast<uint32_t>(id));
  const struct btf_var_secinfo* v = btf_var_secinfos(sec);
  for (uint16_t i = 0; i < btf_vlen(sec); i++, v++) {
    const struct btf_type* var = TypeAt(btf, v->type);
    out.push_back({btf__name_by_offset(btf, var->name_off), v->offset, v->size});
  }
  return out;
}

}  // namespace bpfnative
