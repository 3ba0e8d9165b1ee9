/** Element types a flush sends, with their pg_type oid and binary width. */
const ELEMENTS = {
  bool: { oid: 16, width: 1 },
  int4: { oid: 23, width: 4 },
  oid: { oid: 26, width: 4 },
  int8: { oid: 20, width: 8 },
  float8: { oid: 701, width: 8 },
} as const;

export type ArrayElementType = keyof typeof ELEMENTS;

export type ArrayElement = number | bigint | boolean | string | null | undefined;

const TWO_32 = 2 ** 32;
const INT8_MIN = -(2n ** 63n);
const INT8_MAX = 2n ** 63n - 1n;
/** ndim, has-null flag, element oid, then the one dimension's length and lower bound. */
const ARRAY_HEADER = 20;
const EMPTY_ARRAY_HEADER = 12;

/**
 * A one-dimensional Postgres array in the binary wire format (array_send's): node-postgres sends
 * a Buffer parameter as binary, and the statement's cast (`$1::float8[]`) gives the parameter its
 * type. The server then copies each element instead of parsing text: for a 10,000-row flush of
 * 28 arrays, parsing the text (float8in, int8in) was 28 ms of the server's bind, and formatting it
 * 40 ms of the collector's CPU.
 *
 * Layout (big-endian): ndim, has-null flag, element oid, then per dimension its length and lower
 * bound (1), then per element its byte length (-1: NULL) and bytes. An empty array has ndim 0.
 * int8 takes a bigint, a safe integer or a decimal string; float8 any number; oid and int4 a
 * number; bool a boolean.
 *
 * @example
 * sql`SELECT * FROM unnest(${binaryArray('float8', [1.5, null])}::float8[])`;
 */
export function binaryArray(type: ArrayElementType, values: readonly ArrayElement[]): Buffer {
  let size = values.length ? ARRAY_HEADER : EMPTY_ARRAY_HEADER;
  let nulls = 0;
  for (const v of values) {
    if (v === null || v === undefined) nulls++;
    else size += ELEMENTS[type].width;
    size += 4;
  }
  const { out, view, at: start } = arrayOf(ELEMENTS[type].oid, values.length, nulls > 0, size);
  const { width } = ELEMENTS[type];
  let at = start;
  for (const v of values) at = writeElement(view, at, type, width, v);
  return out;
}

/**
 * A one-dimensional array of a composite type (`typeOid`, e.g. bpf_stats.query_increments) in
 * the binary wire format: per row, its column count, then per column its type oid, byte length
 * (-1: NULL) and bytes (record_send's layout). `fields` are the type's column types in order;
 * each row has one value per field: `columnOf(row, i)`, by default the row's element i. The server checks every oid against the type, so a row type
 * that differs from `fields` is refused, never misread.
 *
 * @example
 * sql`SELECT u.* FROM unnest(${binaryRecordArray(oid, ['oid', 'float8'], [[10, 1.5]])}::my_type[]) u`;
 */
export function binaryRecordArray<Row = readonly ArrayElement[]>(
  typeOid: number,
  fields: readonly ArrayElementType[],
  rows: readonly Row[],
  columnOf: (row: Row, column: number) => ArrayElement = (row, column) => (row as readonly ArrayElement[])[column],
): Buffer {
  // Looked up once per array, not per value: a 10,000-row flush writes 280,000 of them.
  const columns = fields.map((type) => ELEMENTS[type]);
  const n = columns.length;
  let size = rows.length ? ARRAY_HEADER : EMPTY_ARRAY_HEADER;
  for (const row of rows) {
    // Element length, column count, then per column its oid and length.
    size += 8 + n * 8;
    for (let i = 0; i < n; i++) {
      const v = columnOf(row, i);
      if (v !== null && v !== undefined) size += columns[i]!.width;
    }
  }
  const { out, view, at: start } = arrayOf(typeOid, rows.length, false, size);
  let at = start;
  for (const row of rows) {
    const lengthAt = at;
    at += 4;
    view.setInt32(at, n);
    at += 4;
    for (let i = 0; i < n; i++) {
      const column = columns[i]!;
      view.setUint32(at, column.oid);
      at = writeElement(view, at + 4, fields[i]!, column.width, columnOf(row, i));
    }
    view.setInt32(lengthAt, at - lengthAt - 4);
  }
  return out;
}

/** A buffer of `size` bytes with an array's header written: where its elements start. */
function arrayOf(elementOid: number, length: number, hasNulls: boolean, size: number): { out: Buffer; view: DataView; at: number } {
  const out = Buffer.allocUnsafe(size);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  view.setInt32(0, length ? 1 : 0);
  view.setInt32(4, hasNulls ? 1 : 0);
  view.setUint32(8, elementOid);
  if (!length) return { out, view, at: EMPTY_ARRAY_HEADER };
  view.setInt32(12, length);
  view.setInt32(16, 1);
  return { out, view, at: ARRAY_HEADER };
}

/** Writes one element, its length first (-1: NULL): where the next one starts. */
function writeElement(view: DataView, at: number, type: ArrayElementType, width: number, v: ArrayElement): number {
  if (v === null || v === undefined) {
    view.setInt32(at, -1);
    return at + 4;
  }
  view.setInt32(at, width);
  at += 4;
  switch (type) {
    case 'float8':
      view.setFloat64(at, typeof v === 'number' ? v : Number(v));
      break;
    case 'int8':
      writeInt8(view, at, v);
      break;
    case 'oid':
      view.setUint32(at, Number(v));
      break;
    case 'int4':
      view.setInt32(at, Number(v));
      break;
    case 'bool':
      view.setUint8(at, v ? 1 : 0);
      break;
  }
  return at + width;
}

function writeInt8(view: DataView, at: number, v: Exclude<ArrayElement, null | undefined>): void {
  if (typeof v === 'number' && Number.isSafeInteger(v)) {
    // Two halves: no BigInt made for the common case of a number.
    const high = Math.floor(v / TWO_32);
    view.setInt32(at, high);
    view.setUint32(at + 4, v - high * TWO_32);
    return;
  }
  const big = typeof v === 'bigint' ? v : typeof v === 'string' ? BigInt(v) : NaN;
  // What int8in would refuse is refused here too, never wrapped around.
  if (typeof big !== 'bigint' || big < INT8_MIN || big > INT8_MAX) throw new RangeError(`binaryArray: ${String(v)} is not an int8`);
  view.setBigInt64(at, big);
}
