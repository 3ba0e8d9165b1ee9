/* SPDX-License-Identifier: MIT */
/*
 * Record layouts shared by the BPF programs and the TypeScript collector.
 *
 * The collector does not mirror these structs by hand: it reads field names, offsets and
 * sizes from the object's BTF (src/bpf/record-layout.ts), and the build generates its typed
 * contract (src/bpf/contract.ts) from the same BTF, so renaming or adding a field here is
 * picked up on both sides. Keep fields __u64/__u32, or a 4-byte enum for a value user space
 * names, so BTF describes them as plain integers.
 *
 * Constants user space needs are enums, not #defines: BTF carries an enum and its values,
 * but only when something in the object is typed with it (clang emits no BTF for a type
 * nothing uses), so each enum here types the field, map key or global that carries it.
 */
#ifndef RECORDS_H
#define RECORDS_H

#include "vmlinux.h"

/* Exactly pg_stat_statements' key, so `JOIN pg_stat_statements USING (...)` works. */
struct query_key {
	__u64 queryid;
	__u32 userid;
	__u32 dbid;
	__u32 toplevel;
	__u32 pad;
};

/*
 * The scheduler's and the fault handler's per-task cumulative counters that the cpu family
 * charges as deltas between two switch-outs of a backend (bpf/cpu.bpf.h), one line each:
 *     X(field in struct metrics, field of task_struct)
 * Each line becomes a metric, the backend's baseline of it, its share of a slice, and the
 * code that reads, subtracts and adds it. A new counter is one line here; user space then
 * needs its column (src/families/cpu/, a migration, a view). Order = order in struct metrics.
 */
#define SCHED_COUNTERS(X)  \
	X(minflt, min_flt) \
	X(majflt, maj_flt) \
	X(nvcsw, nvcsw)    \
	X(nivcsw, nivcsw)  \
	X(cpu_migrations, se.nr_migrations)

#define SCHED_COUNTER_FIELD(name, task_field) __u64 name;

/* The SCHED_COUNTERS of one task at one moment, or their change between two moments. */
struct sched_counts {
	SCHED_COUNTERS(SCHED_COUNTER_FIELD)
};

/*
 * Nanosecond and count metrics accumulated per query and per backend. The time
 * components partition the wall time the scheduler saw the backend spend on a query:
 * total_ns = on_cpu_ns + runq_ns + (the *_wait_ns below).
 */
struct metrics {
	__u64 total_ns;
	__u64 on_cpu_ns;
	__u64 runq_ns;
	__u64 io_wait_ns;
	__u64 lock_wait_ns;
	__u64 lwlock_wait_ns;
	__u64 reclaim_ns;
	__u64 other_wait_ns;
	__u64 calls;
	SCHED_COUNTERS(SCHED_COUNTER_FIELD) /* minflt, majflt, nvcsw, nivcsw, cpu_migrations */
	/* The other families (memory, io, llc, spinlock); each is filled by its own probe set. */
	__u64 reclaim_pages;         /* pages reclaimed by this task's direct / memcg reclaim */
	__u64 compaction_ns;         /* direct compaction stalls */
	__u64 writeback_throttle_ns; /* balance_dirty_pages pauses */
	__u64 blk_read_ios;
	__u64 blk_read_bytes;
	__u64 blk_write_ios;
	__u64 blk_write_bytes;
	__u64 llc_references;
	__u64 llc_misses;
	__u64 spinlock_delays; /* spinlock delays: sleeps (1 ms and up) of a spinlock wait that spinning did not end */
	/*
	 * Not a figure. In the queries map only: the collector's read (query_read) at which this
	 * CPU's copy last entered query_changes (bpf/query-changes.bpf.h).
	 */
	__u64 read_stamp;
};

/*
 * Log-linear histograms per query, in microseconds: each power of two is cut into
 * 2^HIST_SUB_BITS equal sub-buckets, so a bucket is at most 1/8 of its lower bound wide and
 * bpf_stats.hist_quantile reads a percentile at most 10% off (docs/percentiles.md). Buckets 0..15 are
 * 1 us wide ([i, i+1) us); from there, bucket (g << 3) + m, g >= 1, holds
 * [(8 + m) << (g - 1), (9 + m) << (g - 1)) us. The last bucket also takes anything from
 * 15 << 30 us (~4.5 hours) on. src/collector/histogram-layout.ts has the same arithmetic.
 */
enum hist_layout {
	HIST_SUB_BITS = 3, /* sub-buckets per power of two: 1 << HIST_SUB_BITS */
};
#define HIST_SLOTS 256

enum hist_kind {
	HIST_QUERY_LATENCY = 0, /* statement latency */
	HIST_RUNQ = 1,          /* run-queue waits */
	HIST_IO = 2,            /* block IO request latency */
};

struct hist_key {
	struct query_key q;
	enum hist_kind kind;
	__u32 pad;
};

struct hist {
	__u64 slots[HIST_SLOTS];
	__u64 max_ns;     /* largest observation (per CPU; the reader takes the max over CPUs) */
	__u64 read_stamp; /* hist_read when this CPU's copy last changed (bpf/hist.bpf.h) */
};

/* What a backend was waiting for when it left the CPU (decides where its sleep goes). */
enum sleep_class {
	SLEEP_NONE = 0,   /* preempted or still runnable: the wait shows up as run-queue time */
	SLEEP_CLIENT = 1, /* idle, waiting for the client: not part of any query */
	SLEEP_IO = 2,
	SLEEP_LOCK = 3,
	SLEEP_LWLOCK = 4,
	SLEEP_OTHER = 5,
};

/* Bits of backend_record.flags. */
enum backend_flags {
	BACKEND_IDENTITY_KNOWN = 0x1,     /* userid, dbid, backend_start, backend_type were read */
	BACKEND_EXCLUDED = 0x2,           /* one of the collector's own connections */
	BACKEND_HOLDING = 0x4,            /* `held` has figures waiting for the statement's query id */
	BACKEND_SLEEP_HELD = 0x8,         /* the current sleep began before the statement had a query id */
	BACKEND_HOLDING_LOCK_WAIT = 0x10, /* `held_lock` has a lock wait (locks set) waiting for the query id */
};

/*
 * The executors open in a backend's current top-level statement (opt-in set "nested",
 * bpf/nested.bpf.h), innermost last: NESTED_MAX deep, deeper ones only counted. What every
 * context switch reads of it (the depth, the innermost nested id) is in the record's hot part.
 */
#define NESTED_MAX 8
struct nested_statements {
	__u64 query_desc[NESTED_MAX]; /* each executor's QueryDesc, to match its end */
	__u64 queryid[NESTED_MAX];    /* its statement's id if nested, 0 for the top-level one's */
	__u64 stack[NESTED_MAX];      /* the stack pointer at its ExecutorStart: its caller's frame */
	__u32 userid[NESTED_MAX]; /* CurrentUserId at its ExecutorStart (a SECURITY DEFINER function's owner), 0: unknown */
	__u64 statement_us;       /* st_activity_start_timestamp of the top-level statement they run in */
};

/* Who woke a sleeping backend (opt-in set "blockers", bpf/wait-blockers.bpf.h). */
enum waker_kind {
	WAKER_NONE = 0,          /* no wake-up seen for this sleep */
	WAKER_PROCESS = 1,       /* a child of the postmaster: backend_type and key say which */
	WAKER_POSTMASTER = 2,    /* the postmaster itself */
	WAKER_INTERRUPT = 3,     /* hard or soft interrupt context: a timer, a device, the network */
	WAKER_KERNEL_THREAD = 4, /* a kernel thread (a kworker completing IO, ksoftirqd) */
	WAKER_OTHER_PROCESS = 5, /* a process outside the postmaster (a client, pg_ctl, the collector) */
};

/* The waker of one sleep: its kind, its st_backendType (-1: unknown) and the query it was on (queryid 0: none). */
struct wait_waker {
	struct query_key key;
	__s32 backend_type;
	enum waker_kind kind;
};

/* A heavyweight lock wait (the opt-in locks set) from before the statement had a query id. */
struct held_lock_wait {
	__u32 locktag_type;
	__u32 mode;
	__u32 database;
	__u32 relation;
	__u64 waits;
	__u64 wait_ns;
};

/*
 * Wait events counted beside the figures they belong to rather than in a map of their own
 * (bpf/wait-events.bpf.h): a backend's first four in its record, a query's first two on a CPU in
 * that CPU's copy of its queries entry. Each slot's four fields, one array per field:
 */
#define BACKEND_WAIT_SLOTS 4
#define QUERY_WAIT_SLOTS   2
#define WAIT_SLOTS(n)               \
	__u64 wait_slot_waits[n];   \
	__u64 wait_slot_ns[n];      \
	__u64 wait_slot_runq_ns[n]; \
	__u32 wait_slot_event[n];

/*
 * One live or recently exited postmaster child, keyed by pid. The first part is what the
 * collector reports; the `last*` / `sleep_*` part is the BPF side's bookkeeping between two
 * context switches of the same task.
 */
struct backend_record {
	struct metrics m;
	__u64 queryid;          /* current or last query */
	__u64 backend_start_us; /* st_proc_start: microseconds since 2000-01-01, as Postgres keeps it */
	__u64 task_start_ns;    /* task->start_time (CLOCK_MONOTONIC), when backend_start is unknown */
	__u64 exited_ns;        /* CLOCK_MONOTONIC time of the final context switch; 0 while alive */
	__u32 userid;
	__u32 dbid;
	__s32 backend_type; /* st_backendType, -1 when the process has no PgBackendStatus */
	enum backend_flags flags;
	__u32 pg_pid; /* the pid Postgres knows it by (its pid in the postmaster's pid namespace) */
	__u32 run_userid; /* the user the statement runs as (OuterUserId) when last read, 0: not read (bpf/pg-status.bpf.h) */

	__u64 last_ts;            /* rq->clock at the last switch-out (sched_clock domain) */
	__u64 last_sum_exec;      /* se.sum_exec_runtime then */
	__u64 last_run_delay;     /* sched_info.run_delay then */
	struct sched_counts last; /* SCHED_COUNTERS then */
	__u64 status_ptr;         /* cached MyBEEntry */
	__u64 wait_event_ptr;     /* cached my_wait_event_info */
	struct query_key sleep_key;
	enum sleep_class sleep_class;
	__u32 epoch;                 /* tracking_epoch when last* were taken (bpf/cpu.bpf.h) */
	__u64 nested_current;        /* the innermost nested statement's id now, 0: none (bpf/nested.bpf.h) */
	__u64 nested_sleep_queryid;  /* nested_current when the task last left the CPU */
	__u32 nested_current_userid; /* the user the innermost nested statement runs as, 0: the top level's */
	__u32 nested_sleep_userid;   /* nested_current_userid when the task last left the CPU */
	__u32 nested_depth;          /* executors started in the current statement and not ended */
	__u32 sleep_wait_event; /* wait_event_info when the task last went to sleep, 0: none or not read (bpf/wait-events.bpf.h) */
	__u64 run_user_queryid;    /* st_query_id when run_userid was read */
	__u64 execute_queryid;     /* st_query_id of the last SQL-level EXECUTE (the query set, bpf/query.bpf.h) */
	__u64 prepared_queryid;    /* the id of the prepared statement it ran: its figures go there */
	__u64 uncounted_queryid;   /* st_query_id of a PREPARE that has not ended: no call, as pg_stat_statements */
	__u64 last_state_start_us; /* st_state_start_timestamp of the last statement end seen (bpf/latency.bpf.h) */
	__u64 memory_cgroup; /* memory cgroup id (kernfs inode) when first tracked: a container's processes are born in theirs */
	/* The top-level statement the queries map refused a part of, 0: none; the rest of it is dropped too (bpf/attribution.bpf.h). */
	__u64 refused_queryid;
	__u32 refused_userid;
	__u64 refused_start_us; /* its st_activity_start_timestamp, 0: unknown */
	/*
	 * Its sleeps waiting for the client (ClientRead: idle between statements, SLEEP_CLIENT), and their
	 * time: counted here rather than in backend_wait_events, as the most common sleep of a backend
	 * (bpf/wait-events.bpf.h).
	 */
	__u64 client_waits;
	__u64 client_wait_ns;
	/* The remainder of its runnable intervals (SLEEP_NONE: a preempted slice's interrupt time), which other_wait_ns holds: no wait event. */
	__u64 unclassed_ns;
	/*
	 * Its first BACKEND_WAIT_SLOTS other wait events and their totals, as backend_wait_events
	 * would hold them (bpf/wait-events.bpf.h): a slot is the event's for the record's life, so an
	 * event is either here or in the map, never both. A slot is used once its waits is not 0.
	 */
	WAIT_SLOTS(BACKEND_WAIT_SLOTS)
	/*
	 * The waker of the sleep that began at waker_sleep_ts (the record's last_ts then), left by the
	 * blockers set at the wake-up and taken by the switch-out that ends that sleep (bpf/wait-blockers.bpf.h).
	 */
	__u64 waker_sleep_ts;
	struct wait_waker waker;
	/*
	 * What a running statement did before it had a query id (parse analysis, its relation
	 * locks): charged to the id it gets, or to queryid 0 if it ends without one
	 * (bpf/attribution.bpf.h). Only the cpu family's time and counters are held.
	 */
	struct metrics held;
	__u64 held_statement; /* statement_fingerprint() of the statement `held` belongs to (0: unknown) */
	struct held_lock_wait held_lock;
	struct nested_statements nested;
};

/*
 * The queries map's value, one per CPU: a query's figures, and its first QUERY_WAIT_SLOTS wait
 * events on this CPU with their totals, as query_wait_events would hold them
 * (bpf/wait-events.bpf.h). A slot is the event's for the entry's life; another CPU's copy may
 * hold the same event, or the map may, and the collector sums them.
 */
struct query_value {
	struct metrics m;
	WAIT_SLOTS(QUERY_WAIT_SLOTS)
};

/*
 * A statement's figures whose query key the queries map refused at once (full, no memory at
 * hand, or the role's share under pressure), held for the collector's next flush, which takes
 * the entry and writes the figures under `key` (bpf/attribution.bpf.h).
 */
struct query_overflow {
	struct query_key key;
	struct metrics m;
};

/* Indexes into the `counters` array, its key type (bpf/maps.bpf.h): overflow and failures, surfaced in bpf_stats.health. */
/*
 * A retired record's key in exited_backends: the pid with the process's start time, so that a
 * pid given again before the collector wrote the first one's record retires under its own key.
 */
struct exited_key {
	__u32 pid;
	__u32 pad;
	__u64 task_start_ns;
};

/*
 * What changed in the maps, per CPU, since the collector's last look (bpf/activity.bpf.h): its
 * periodic tick reads these two numbers, and reads the maps only when a flush could write something.
 */
struct activity {
	__u64 changes; /* entries added or removed, query figures, histograms or lock waits updated, overflows */
	__u64 busy_ns; /* added to backend records' busy figures: on CPU, IO, lock and LWLock waits, reclaim, compaction, writeback throttling */
};

enum counter_index {
	COUNTER_BACKENDS_FULL = 0,     /* a backend could not be tracked: backends map full */
	COUNTER_QUERIES_FULL = 1,      /* a query key could not be added: queries map full */
	COUNTER_STATUS_UNREADABLE = 2, /* PgBackendStatus unreadable: time went to the backend only */
	COUNTER_HISTOGRAMS_FULL = 3,   /* a histogram could not be added: histograms map full */
	COUNTER_MEM_STALLS_FULL = 4,   /* a reclaim/compaction stall could not be timed: mem_stalls full */
	COUNTER_IO_INFLIGHT_FULL = 5,  /* a block request's owner could not be kept: io_inflight full */
	COUNTER_MEMIO_UNTRACKED = 6, /* a stall or request of a backend with no record yet: its query got it, its backend row not */
	COUNTER_IO_COMPLETIONS_MISSED = 7, /* a block completion ran no BPF: charged at reuse, no latency */
	COUNTER_LOCK_WAITS_FULL = 8,       /* a lock wait key could not be added: lock_waits map full */
	COUNTER_LWLOCK_WAITS_FULL = 9,     /* an LWLock wait key could not be added: lwlock_waits map full */
	COUNTER_ROLE_QUOTA = 10,           /* a query key was not added: its role holds its share of the queries map */
	COUNTER_ROLE_QUOTA_UNTRACKED = 11, /* a role's share could not be counted: role_added full (more than 1024 roles) */
	COUNTER_EXITED_FULL = 12,          /* an exited process's record stayed in backends: exited_backends full */
	COUNTER_AIO_HANDLES_FULL = 13,   /* an IO handle's owner could not be kept: aio_handles full (bpf/aio.bpf.h) */
	COUNTER_CALLS_UNATTRIBUTED = 14, /* a statement end (query set) reached no query key (bpf/query.bpf.h) */
	COUNTER_QUERY_CHANGES_FULL = 15, /* a changed query key could not be noted: the collector reads the whole map once (bpf/query-changes.bpf.h) */
	COUNTER_HIST_CHANGES_FULL = 16, /* a changed histogram could not be noted: the collector reads the whole map once (bpf/hist.bpf.h) */
	COUNTER_MAP_NO_MEMORY = 17, /* an insert was refused with room left: no memory at hand (bpf/maps.bpf.h, count_refusal) */
	COUNTER_QUERY_KEY_HELD = 18, /* a query key the map refused at once: its figures were held for the next flush, not dropped (bpf/attribution.bpf.h) */
	COUNTER_WAIT_EVENTS_FULL = 19, /* a (query, wait event) key could not be added: query_wait_events map full (bpf/wait-events.bpf.h) */
	COUNTER_BACKEND_WAIT_EVENTS_FULL = 20, /* a (backend, wait event) key could not be added: backend_wait_events map full */
	COUNTER_WAIT_BLOCKERS_FULL = 21, /* a (query, wait event, waker) key could not be added: query_wait_blockers map full (bpf/wait-blockers.bpf.h) */
	COUNTER_SWITCH_SCRATCH_BUSY =
		22, /* a uprobe's switch-out found its CPU's scratch slot taken by a preempted one: that slice went to the next switch-out (bpf/cpu.bpf.h) */
	COUNTER_MAX = 23, /* room for the families' own counters */
};

#endif /* RECORDS_H */
