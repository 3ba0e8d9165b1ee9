/* SPDX-License-Identifier: MIT */
/*
 * Record layouts of the lock families (probe sets `locks`, `lwlock`, `spinlock`), shared with
 * the collector, which reads them from BTF by field name (src/collect/lock-wait-reader.ts).
 */
#ifndef LOCKS_H
#define LOCKS_H

#include "pgstats.h"

/* Heavyweight lock waits of one query, by what it waited for (LOCKTAG type, LOCKMODE). */
struct lock_wait_key {
	struct query_key q;
	__u32 locktag_type;  /* enum LockTagType: 0 relation, 1 extend, ... 5 transactionid, ... */
	__u32 mode;          /* LOCKMODE: 1 AccessShareLock ... 8 AccessExclusiveLock */
	__u32 database;      /* locktag_field1 for relation-scoped, object and advisory tags, else 0 */
	__u32 relation;      /* locktag_field2 for relation, extend, page and tuple tags, else 0 */
};

#define TRANCHE_NAME_LEN 32
#define LWLOCK_MODE_UNKNOWN 0xffu /* no USDT: the semaphore sleep does not say which mode */

/* LWLock waits of one query, by tranche (and mode when the USDT probe gives it). */
struct lwlock_wait_key {
	struct query_key q;
	__u32 tranche_id;    /* from *my_wait_event_info (PG_WAIT_LWLOCK | tranche) */
	__u32 mode;          /* LWLockMode: 0 exclusive, 1 shared, 2 wait-until-free; or unknown */
	char tranche[TRANCHE_NAME_LEN]; /* the name the USDT probe passes; empty without USDT */
};

struct wait_totals {
	__u64 waits;
	__u64 wait_ns;
};

/* Its overflow counters (COUNTER_LOCK_WAITS_FULL, COUNTER_LWLOCK_WAITS_FULL) are in pgstats.h with the others. */

#endif /* LOCKS_H */
