import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { COLLECTOR_KERNEL_NEEDS, SET_KERNEL_NEEDS } from '../../src/capabilities/kernel-needs.js';
import { possibleSetPrograms } from '../../src/collector/probe-attachment.js';
import { loadRefusing, refusalOf, verifierReason } from '../../src/collector/verifier-refusal.js';
import { UserError } from '../../src/errors.js';
import { PROBE_SETS } from '../../src/families/index.js';

/*
 * Logs as the native binding hands them over (NativeError.log: libbpf's lines since the load
 * began, the verifier's log one line each). The 6.18 ones are verbatim from this machine; the
 * others carry the reason lines the kernel matrix saw (DESIGN.md) in the frame libbpf 1.1 prints.
 */

/** 6.18 without a private stack: the object of 2026-11-28, refused before any instruction ran. */
const STACK_528 = [
  "libbpf: prog 'on_sched_switch': BPF program load failed: Permission denied",
  "libbpf: prog 'on_sched_switch': -- BEGIN PROG LOAD LOG --",
  "Func#7 ('hist_on_switch_out') is safe for any args that match its prototype",
  'combined stack size of 2 calls is 528. Too large',
  'processed 11697 insns (limit 1000000) max_states_per_insn 15 total_states 795 peak_states 689 mark_read 0',
  '-- END PROG LOAD LOG --',
  "libbpf: prog 'on_sched_switch': failed to load: -13",
  "libbpf: failed to load object '/work/main/build/bpf/pgstats.bpf.o'",
];

/** 6.1: a global function's pointer argument used as a map key. */
const MAP_KEY_6_1 = [
  "libbpf: prog 'on_sched_switch': BPF program load failed: Permission denied",
  "libbpf: prog 'on_sched_switch': -- BEGIN PROG LOAD LOG --",
  'Validating query_add_wait() func#3...',
  '157: R1=ptr_or_null_query_key(id=1,off=0,imm=0) R2=ptr_or_null_query_sleep(id=2,off=0,imm=0) R10=fp0',
  '; m = query_key_metrics_of(key, 0, &v); @ cpu.bpf.h:167',
  '163: (bf) r2 = r6                      ; R2_w=mem(id=0,ref_obj_id=0,off=0,imm=0) R6=mem(id=0,ref_obj_id=0,off=0,imm=0)',
  '164: (85) call bpf_map_lookup_elem#1',
  'R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value',
  'processed 9 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0',
  '-- END PROG LOAD LOG --',
  "libbpf: prog 'on_sched_switch': failed to load: -13",
  "libbpf: failed to load object 'build/bpf/pgstats.bpf.o'",
];

/** 5.10: no bpf_get_current_task_btf (helper 158, 5.11). */
const HELPER_5_10 = [
  "libbpf: prog 'on_cpu_tick': BPF program load failed: Invalid argument",
  "libbpf: prog 'on_cpu_tick': -- BEGIN PROG LOAD LOG --",
  '0: R1=ctx(id=0,off=0,imm=0) R10=fp0',
  '; struct task_struct *task = bpf_get_current_task_btf(); @ cpu.bpf.h:526',
  '0: (85) call bpf_get_current_task_btf#158',
  'unknown func bpf_get_current_task_btf#158',
  'processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0',
  '',
  '-- END PROG LOAD LOG --',
  "libbpf: prog 'on_cpu_tick': failed to load: -22",
  "libbpf: failed to load object 'build/bpf/pgstats.bpf.o'",
];

/** A kernel that knows the helper but not in this program type. */
const HELPER_TYPE = [
  "libbpf: prog 'on_query_done': BPF program load failed: Invalid argument",
  "libbpf: prog 'on_query_done': -- BEGIN PROG LOAD LOG --",
  '0: (85) call bpf_get_current_task_btf#158',
  'program of this type cannot use helper bpf_get_current_task_btf#158',
  'verification time 21 usec',
  'stack depth 0',
  'processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0',
  '-- END PROG LOAD LOG --',
  "libbpf: prog 'on_query_done': failed to load: -22",
];

/** 6.18: on_dirty_pause loaded against a tracepoint of one argument (the integration test's refusal). */
const CONTEXT_ACCESS = [
  "libbpf: prog 'on_dirty_pause': BPF program load failed: Permission denied",
  "libbpf: prog 'on_dirty_pause': -- BEGIN PROG LOAD LOG --",
  '0: R1=ctx() R10=fp0',
  '; int BPF_PROG(on_dirty_pause, struct bdi_writeback *wb, struct dirty_throttle_control *dtc, @ io.bpf.h:69',
  '0: (79) r9 = *(u64 *)(r1 +48)',
  "func 'sched_kthread_stop_ret' doesn't have 4-th argument",
  'invalid bpf_context access off=48 size=8',
  'processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0',
  '-- END PROG LOAD LOG --',
  "libbpf: prog 'on_dirty_pause': failed to load: -13",
  "libbpf: failed to load object '/work/main/build/bpf/pgstats.bpf.o'",
];

describe('the verifier reason', () => {
  it("is the verifier log's last meaningful line, statistics and the log's frame skipped", () => {
    expect(verifierReason(STACK_528)).toBe('combined stack size of 2 calls is 528. Too large');
    expect(verifierReason(MAP_KEY_6_1)).toBe('R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value');
    expect(verifierReason(HELPER_5_10)).toBe('unknown func bpf_get_current_task_btf#158');
    expect(verifierReason(HELPER_TYPE)).toBe('program of this type cannot use helper bpf_get_current_task_btf#158');
    expect(verifierReason(CONTEXT_ACCESS)).toBe('invalid bpf_context access off=48 size=8');
  });

  it('is none when the lines hold no verifier log, or an empty one', () => {
    expect(verifierReason(["libbpf: map 'queries': failed to create: Cannot allocate memory(-12)"])).toBeNull();
    expect(verifierReason(["libbpf: prog 'x': -- BEGIN PROG LOAD LOG --", 'processed 0 insns', '-- END PROG LOAD LOG --'])).toBeNull();
  });
});

describe('a refusal', () => {
  it('names the program, the kernel release and the reason in one line', () => {
    expect(refusalOf(STACK_528, '6.18.44')).toEqual({
      program: 'on_sched_switch',
      reason: 'combined stack size of 2 calls is 528. Too large',
      text: 'Linux 6.18.44 refuses program on_sched_switch: combined stack size of 2 calls is 528. Too large',
    });
    expect(refusalOf(HELPER_5_10, '5.10.0-33-cloud-amd64')?.text).toBe(
      'Linux 5.10.0-33-cloud-amd64 refuses program on_cpu_tick: unknown func bpf_get_current_task_btf#158',
    );
  });

  it("is libbpf's own line about the program when the kernel gave no verifier log", () => {
    const unprepared = [
      "libbpf: prog 'on_blk_start': failed to find kernel BTF type ID of 'block_io_start': -3",
      "libbpf: prog 'on_blk_start': failed to prepare load attributes: -3",
      "libbpf: prog 'on_blk_start': failed to load: -3",
    ];
    expect(refusalOf(unprepared, '6.1.0')?.reason).toBe("failed to find kernel BTF type ID of 'block_io_start': -3");
    expect(
      refusalOf(["libbpf: prog 'x': BPF program load failed: Operation not permitted", "libbpf: prog 'x': failed to load: -1"])?.reason,
    ).toBe('BPF program load failed: Operation not permitted');
  });

  it('is none for a load that failed elsewhere than a program (a map, a signal)', () => {
    expect(
      refusalOf(["libbpf: map 'histograms': failed to create: Cannot allocate memory(-12)", "libbpf: failed to load object 'x'"]),
    ).toBeNull();
    expect(refusalOf([])).toBeNull();
  });
});

/** A failed load as the native binding throws it. */
function loadError(log: string[]): Error {
  return Object.assign(new Error(`bpf_object__load failed\n${log.join('\n')}`), { errno: 13, code: 'EACCES', log });
}

/** Loads of an object whose programs the kernel refuses while any of `refuse` is still loaded. */
function kernelRefusing(refuse: Record<string, string[]>, setsOf: Record<string, string[]>) {
  const loads: string[][] = [];
  const closed: number[] = [];
  const result = (required: (set: string) => boolean) =>
    loadRefusing<string, { id: number; close(): void; programs: string[] }>(
      (leftOut) => {
        const off = new Set([...leftOut.keys()].flatMap((set) => Object.keys(setsOf).filter((p) => setsOf[p]!.includes(set))));
        const programs = Object.keys(setsOf).filter((p) => !off.has(p) || setsOf[p]!.some((set) => !leftOut.has(set)));
        const id = loads.push(programs);
        return { id, programs, close: () => closed.push(id) };
      },
      (object) => {
        // The kernel's loader stops at the first program it refuses: here, in the order given.
        const refused = Object.keys(refuse).find((p) => object.programs.includes(p));
        // Each log as the kernel would have said it of that program.
        if (refused) throw loadError(refuse[refused]!.map((line) => line.replace(/prog '[^']+'/, `prog '${refused}'`)));
      },
      (program) => setsOf[program] ?? [],
      required,
    );
  return { result, loads, closed };
}

describe('loading without the sets the kernel refuses', () => {
  const setsOf = { on_sched_switch: ['cpu'], on_blk_start: ['io'], on_query_done: ['query', 'nested'], find_postmaster: [] };

  it('leaves out each refused set, loads again without its programs, and says why', () => {
    const { result, loads, closed } = kernelRefusing({ on_blk_start: CONTEXT_ACCESS, on_query_done: HELPER_TYPE }, setsOf);
    const { object, refused } = result((set) => set === 'cpu');
    expect(loads).toEqual([
      ['on_sched_switch', 'on_blk_start', 'on_query_done', 'find_postmaster'],
      ['on_sched_switch', 'on_query_done', 'find_postmaster'],
      ['on_sched_switch', 'find_postmaster'],
    ]);
    expect(object.id).toBe(3);
    expect(closed).toEqual([1, 2]);
    expect([...refused.keys()]).toEqual(['io', 'query', 'nested']);
    expect(refused.get('nested')?.reason).toBe('program of this type cannot use helper bpf_get_current_task_btf#158');
  });

  it('ends in one line when a required set, or the collector itself, is refused', () => {
    const cpu = kernelRefusing({ on_sched_switch: STACK_528 }, setsOf);
    const refusedCpu = thrownBy(() => cpu.result((set) => set === 'cpu'));
    expect(refusedCpu).toBeInstanceOf(UserError);
    expect(refusedCpu.message).toMatch(
      /^probe set cpu is not supported here: Linux \S+ refuses program on_sched_switch: combined stack size of 2 calls is 528\. Too large$/,
    );
    // io, refused before cpu was reached, changes nothing: one line, cpu's.
    const both = kernelRefusing({ on_blk_start: CONTEXT_ACCESS, on_sched_switch: STACK_528 }, setsOf);
    expect(thrownBy(() => both.result((set) => set === 'cpu')).message).toMatch(/^probe set cpu is not supported here: /);
    expect(both.closed).toEqual([1, 2]);

    const own = kernelRefusing({ find_postmaster: HELPER_5_10 }, setsOf);
    const refusedOwn = thrownBy(() => own.result(() => false));
    expect(refusedOwn).toBeInstanceOf(UserError);
    expect(refusedOwn.message).toMatch(
      /^the collector cannot run here: Linux \S+ refuses program find_postmaster: unknown func bpf_get_current_task_btf#158$/,
    );
  });

  it('throws any other failure as it is', () => {
    const failure = Object.assign(new Error('bpf_map__set_max_entries failed'), { errno: 12, code: 'ENOMEM', log: [] });
    expect(() =>
      loadRefusing(
        () => ({ close: () => undefined }),
        () => {
          throw failure;
        },
        () => [],
        () => false,
      ),
    ).toThrow(failure);
  });
});

describe('the oldest kernel each set needs', () => {
  const doc = readFileSync(new URL('../../docs/install.md', import.meta.url), 'utf8');
  const rows = new Map(
    doc
      .split('\n')
      .map((line) => /^\| (\w+) +\| (.*?) +\| ([\d.]+) +\| (.*?) +\|$/.exec(line))
      .filter((m) => m !== null)
      .map((m) => [m[1]!, { programs: m[2]!, since: m[3]!, why: m[4]! }]),
  );

  it('is in docs/install.md as check says it, with every program of the set named', () => {
    expect([...rows.keys()].sort()).toEqual(Object.keys(PROBE_SETS).sort());
    for (const set of Object.values(PROBE_SETS)) {
      const row = rows.get(set.name)!;
      expect(row.since, set.name).toBe(SET_KERNEL_NEEDS[set.name].since);
      for (const program of possibleSetPrograms(set)) {
        if (!['on_execute_plan', 'on_prepare_stmt', 'on_query_done'].includes(program) || set.name === 'query')
          expect(row.programs, `${set.name} ${program}`).toContain(program);
      }
    }
    expect(doc).toContain(`need ${COLLECTOR_KERNEL_NEEDS.since} (`);
  });

  it("is the cpu set's at least, for a run: every set runs beside it", () => {
    expect(doc).toContain(`Linux ${SET_KERNEL_NEEDS.cpu.since} or newer`);
  });
});

function thrownBy(run: () => unknown): Error {
  try {
    run();
  } catch (error) {
    return error as Error;
  }
  throw new Error('nothing was thrown');
}
