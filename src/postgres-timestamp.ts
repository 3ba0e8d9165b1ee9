/** Postgres timestamps (TimestampTz) count microseconds from 2000-01-01. */
export const PG_EPOCH_UNIX_US = 946_684_800_000_000n;

/** The wall clock now as a Postgres timestamp (to the millisecond, never later than now). */
export function postgresTimestampNow(): bigint {
  return BigInt(Date.now()) * 1000n - PG_EPOCH_UNIX_US;
}
