/**
 * BTF type records (include/uapi/linux/btf.h): each is a 12-byte struct btf_type followed by a
 * tail whose length depends on its kind and vlen. Readers that walk the kernel's type section
 * record by record (there is no index) step over each with this.
 */
export const BTF_TYPE_HEADER_BYTES = 12;

/** The highest kind this reader knows (BTF_KIND_ENUM64). */
const BTF_KIND_MAX = 19;

/** Bytes after a record's header, by kind and vlen; null for a kind newer than this reader knows. */
export function btfTypeTail(kind: number, vlen: number): number | null {
  switch (kind) {
    case 1: // INT
    case 14: // VAR
    case 17: // DECL_TAG
      return 4;
    case 3: // ARRAY
      return 12;
    case 4: // STRUCT
    case 5: // UNION
    case 15: // DATASEC
    case 19: // ENUM64
      return vlen * 12;
    case 6: // ENUM
    case 13: // FUNC_PROTO
      return vlen * 8;
    default: // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
      return kind <= BTF_KIND_MAX ? 0 : null;
  }
}
