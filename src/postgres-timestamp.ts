/** Postgres timestamps (TimestampTz) count microseconds from 2000-01-01. */
export const PG_EPOCH_UNIX_US = 946_684_800_000_000n;

/**
 * A Postgres timestamp no earlier than now: the end of the current millisecond, as the wall
 * clock (Date.now()) has no finer grain. Anything Postgres stamped before this call is earlier.
 */
export function postgresTimestampNotBeforeNow(): bigint {
  return (BigInt(Date.now()) + 1n) * 1000n - PG_EPOCH_UNIX_US;
}
