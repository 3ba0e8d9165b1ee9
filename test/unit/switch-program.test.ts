import { describe, expect, it } from 'vitest';
import { KernelFeatures, protoParams, type TypeSection } from '../../src/collector/kernel-features.js';
import { possibleSetPrograms } from '../../src/collector/probe-attachment.js';
import { otherSwitchProgramsOff, switchProgram, withSwitchProgram } from '../../src/collector/switch-program.js';
import { PROBE_SETS } from '../../src/families/index.js';

/** A kernel whose sched_switch passes `args` arguments (null: its BTF does not say). */
const kernelWith = (args: number | null) => ({ tracepointArgs: (name: string) => (name === 'sched_switch' ? args : null) });

describe('switchProgram', () => {
  it('takes prev_state where sched_switch passes it, reads the task state where it passes three', () => {
    expect(switchProgram(kernelWith(4), '5.15.0-91-generic')).toBe('on_sched_switch'); // a backport
    expect(switchProgram(kernelWith(3), '5.15.0-91-generic')).toBe('on_switch_3args');
    expect(switchProgram(kernelWith(3), '5.14.0-427.el9.x86_64')).toBe('on_switch_3args');
    expect(switchProgram(kernelWith(null), '5.10.0-30-cloud-amd64')).toBe('on_sched_switch');
  });

  it('does not read the BTF from 5.18 on, where every kernel passes prev_state', () => {
    const unread = { tracepointArgs: () => expect.unreachable('the BTF was read') as never };
    expect(switchProgram(unread, '5.18.0')).toBe('on_sched_switch');
    expect(switchProgram(unread, '6.18.44-fc-v1272')).toBe('on_sched_switch');
    expect(switchProgram(kernelWith(3), '5.17.15')).toBe('on_switch_3args');
    expect(switchProgram(kernelWith(3), 'not a release')).toBe('on_switch_3args');
  });
});

describe('withSwitchProgram', () => {
  it("names the chosen program wherever a set names the switch-out: the cpu set's, and the sched and latency switches", () => {
    const sets = withSwitchProgram(PROBE_SETS, 'on_switch_3args');
    expect(possibleSetPrograms(sets.cpu)).toEqual(['on_switch_3args', 'on_cpu_tick']);
    expect(possibleSetPrograms(sets.sched)).toEqual(['on_switch_3args']);
    expect(possibleSetPrograms(sets.latency)).toEqual(['on_switch_3args', 'on_backend_exit']);
    for (const set of Object.values(sets)) expect(possibleSetPrograms(set)).not.toContain('on_sched_switch');
    // The rest of a set stays as declared, and the declared sets are left alone.
    expect(sets.cpu.description).toBe(PROBE_SETS.cpu.description);
    expect(possibleSetPrograms(PROBE_SETS.cpu)).toEqual(['on_sched_switch', 'on_cpu_tick']);
    expect(withSwitchProgram(PROBE_SETS, 'on_sched_switch').cpu).toBe(PROBE_SETS.cpu);
  });

  it('turns off the other switch-out program only', () => {
    const programs = ['on_sched_switch', 'on_switch_3args', 'on_cpu_tick'].map((name) => ({ name, autoload: true }));
    const object = {
      programs: () => programs.map((p) => ({ ...p, section: '', type: 0 })),
      setAutoload: (name: string, on: boolean) => {
        programs.find((p) => p.name === name)!.autoload = on;
      },
    } as unknown as Parameters<typeof otherSwitchProgramsOff>[0];
    expect(otherSwitchProgramsOff(object, 'on_switch_3args')).toEqual(['on_sched_switch']);
    expect(programs.filter((p) => p.autoload).map((p) => p.name)).toEqual(['on_switch_3args', 'on_cpu_tick']);
  });
});

/** A BTF type section of the given records (each its u32 words), handed out `chunk` bytes a read. */
function section(records: number[][], chunk: number): TypeSection {
  const all = Buffer.from(new Uint32Array(records.flat()).buffer);
  return {
    bytes: Buffer.alloc(all.length),
    filled: 0,
    more() {
      const n = Math.min(chunk, all.length - this.filled);
      all.copy(this.bytes, this.filled, this.filled, this.filled + n);
      this.filled += n;
      return n > 0;
    },
  };
}

const kind = (k: number, vlen = 0) => ((k << 24) | vlen) >>> 0;
const NAME = 77; // the typedef's name offset in the string section

describe('protoParams: the parameters of a typedef to a pointer to a function prototype, from BTF types', () => {
  // ids: 1 int, 2 struct (2 members), 3 typedef -> 5, 4 func proto (2 params), 5 ptr -> 6, 6 func proto (5 params), 7 enum (1 value)
  const records = [
    [1, kind(1), 4, 0x20],
    [2, kind(4, 2), 16, 3, 1, 0, 4, 1, 64],
    [NAME, kind(8), 5],
    [0, kind(13, 2), 0, 0, 1, 0, 1],
    [0, kind(2), 6],
    [0, kind(13, 5), 0, 0, 5, 0, 1, 0, 5, 0, 5, 0, 1],
    [9, kind(6, 1), 4, 10, 0],
  ];

  it('follows typedef -> PTR -> FUNC_PROTO by type id, whatever the reads', () => {
    for (const chunk of [4, 12, 20, 4096]) expect(protoParams(section(records, chunk), NAME), `chunk ${chunk}`).toBe(5);
  });

  it('stops reading once it has the prototype', () => {
    const s = section([...records, ...Array.from({ length: 1000 }, () => [1, kind(1), 4, 0x20])], 64);
    expect(protoParams(s, NAME)).toBe(5);
    expect(s.filled).toBeLessThan(256);
  });

  it('is null for a name no typedef has, a typedef not to a prototype, or a kind it cannot step over', () => {
    expect(protoParams(section(records, 64), 78)).toBeNull();
    expect(
      protoParams(
        section(
          [
            [NAME, kind(8), 2],
            [1, kind(1), 4, 0x20],
          ],
          64,
        ),
        NAME,
      ),
    ).toBeNull();
    expect(protoParams(section([[0, kind(31), 0], ...records], 64), NAME)).toBeNull();
  });
});

describe('KernelFeatures.tracepointArgs', () => {
  it("counts a tracepoint's arguments without the leading __data, and only for the tracepoints the BTF names", () => {
    const strings = Buffer.from('\0int\0btf_trace_sched_switch\0btf_trace_block_io_start\0');
    const asked: number[] = [];
    const kernel = new KernelFeatures(
      strings,
      () => null,
      (at) => {
        asked.push(at);
        return at === strings.indexOf('btf_trace_sched_switch') ? 4 : null;
      },
    );
    expect(kernel.tracepointArgs('sched_switch')).toBe(3);
    expect(kernel.tracepointArgs('sched_switch')).toBe(3); // memoized
    expect(kernel.tracepointArgs('block_io_start')).toBeNull();
    expect(kernel.tracepointArgs('sched_waking')).toBeNull();
    expect(asked).toEqual([strings.indexOf('btf_trace_sched_switch'), strings.indexOf('btf_trace_block_io_start')]);
  });
});
