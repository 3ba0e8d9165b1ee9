import type pg from 'pg';
import { Structs } from '../bpf/contract.js';

/*
 * How many query keys the queries map holds: what pg_stat_statements can show, we can show.
 * pg_stat_statements keeps at most pg_stat_statements.max keys; the map needs those and keys
 * pgss lacks (queryid 0 of each user and database, statements that failed, keys pgss
 * deallocated that wait for their last write and quiet eviction), hence a quarter more. Never
 * below the size the map had before it was sized from the setting (pgss' default max is 5000),
 * never above a ceiling that bounds its kernel memory: a per-CPU hash takes each entry's value
 * once per possible CPU (see queriesMapBytes).
 */
export const QUERY_KEYS_FLOOR = 8192;
export const QUERY_KEYS_CEILING = 65_536;
const HEADROOM = 1.25;

/** The map's capacity for a server whose pg_stat_statements.max is `pgssMax` (null: pgss not loaded). */
export function queryMapEntries(pgssMax: number | null): number {
  if (pgssMax === null || !Number.isFinite(pgssMax) || pgssMax <= 0) return QUERY_KEYS_FLOOR;
  return Math.min(QUERY_KEYS_CEILING, Math.max(QUERY_KEYS_FLOOR, Math.ceil(pgssMax * HEADROOM)));
}

/**
 * The role share (bpf/attribution.bpf.h) is enforced only while the map holds this many keys:
 * 7/8 of it. An honest role (as many distinct statements as pgss keeps, 4/5 of the map at most)
 * never gets there; a flooding role is stopped with an eighth of the map left for the others.
 */
export function roleGuardFill(maxQueries: number): number {
  return Math.floor((maxQueries * 7) / 8);
}

/** pg_stat_statements.max of the server behind `client`; null when pg_stat_statements is not loaded (the setting does not exist). */
export async function pgStatStatementsMax(client: pg.Client): Promise<number | null> {
  const { rows } = await client.query<{ max: string | null }>(`SELECT pg_catalog.current_setting('pg_stat_statements.max', true) AS max`);
  const max = rows[0]?.max;
  return max ? Number(max) : null;
}

/** Bytes of the queries map's values per possible CPU when it holds `entries` keys (struct query_value, rounded to 8). */
export function queriesBytesPerCpu(entries: number): number {
  return entries * Math.ceil(Structs.query_value.size / 8) * 8;
}
