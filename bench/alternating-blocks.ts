/*
 * The alternating-blocks method of the overhead benchmarks: ONE long pgbench -S run with
 * per-second progress, and the collector switched off and on every few seconds inside it
 * (a long-running sidecar paused with SIGUSR1 and resumed with SIGUSR2). Each on-block is set
 * against the off-blocks just before and after it: seconds apart, on the same connections and
 * the same warm caches, so the host's drift (which moves whole 10-s runs by ±10% here) mostly
 * cancels, and a long-running collector's steady state is what is measured, not a young one's.
 */
import type { ThrowawayCluster } from '../src/cluster/throwaway-cluster.js';
import { runSelectOnlyWithProgress, type ProgressSample } from './pgbench.js';

/** Load before the first switch, in the initial state: a sidecar's start-up is not its steady state. */
export const SETTLE_SECONDS = 10;

/** Seconds after each switch that belong to neither state: the mixed second and the switch's own work. */
export const SWITCH_SECONDS = 2;

/** When the collector was switched, in Unix seconds, and to which state. */
export interface Toggle {
  at: number;
  on: boolean;
}

/** The whole seconds of pgbench progress that fell inside one state. */
export interface Block {
  on: boolean;
  tps: number[];
}

/** One on-block against its two neighbours. */
export interface BlockRatio {
  tpsOn: number;
  tpsOff: number;
  ratio: number;
}

/**
 * A sample covers the second before its timestamp. It is kept only if no switch happened in it
 * or in the second before it: the second a switch falls in is mixed, and the next one carries
 * the switch itself (detaching and the pause's last flush, attaching again), which a collector
 * left running never does. `slack` absorbs the difference between our clock reading and
 * pgbench's.
 */
export function splitBlocks(samples: ProgressSample[], toggles: Toggle[], initiallyOn: boolean, slack = 0.1): Block[] {
  const blocks: Block[] = [];
  let current: Block | null = null;
  let currentToggle = -2; // index of the switch that began `current` (-1: none yet)
  for (const sample of samples) {
    if (toggles.some((t) => t.at > sample.at - SWITCH_SECONDS - slack && t.at <= sample.at + slack)) {
      current = null;
      continue;
    }
    const last = toggles.filter((t) => t.at <= sample.at - 1).length - 1;
    if (!current || last !== currentToggle) {
      current = { on: last >= 0 ? toggles[last]!.on : initiallyOn, tps: [] };
      blocks.push(current);
      currentToggle = last;
    }
    current.tps.push(sample.tps);
  }
  return blocks;
}

const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

/** Every on-block with an off-block on each side: its mean TPS over the mean of theirs. */
export function blockRatios(blocks: Block[]): BlockRatio[] {
  const ratios: BlockRatio[] = [];
  for (let i = 1; i + 1 < blocks.length; i++) {
    const [before, block, after] = [blocks[i - 1]!, blocks[i]!, blocks[i + 1]!];
    if (!block.on || before.on || after.on) continue;
    const tpsOn = mean(block.tps);
    const tpsOff = (mean(before.tps) + mean(after.tps)) / 2;
    ratios.push({ tpsOn, tpsOff, ratio: tpsOn / tpsOff });
  }
  return ratios;
}

export interface AlternatingRun {
  clients: number;
  /** On-blocks; there is one more off-block, so every on-block has one on each side. */
  pairs: number;
  blockSeconds: number;
  /** Load before the first switch, in the initial state (the sidecar's settling). */
  settleSeconds: number;
  initiallyOn: boolean;
  /** Switches the collector; resolves once the switch was asked for. */
  switchTo: (on: boolean) => void | Promise<void>;
}

/**
 * The benches' schedule: SETTLE_SECONDS in the on state, then `pairs` on-blocks of
 * `blockSeconds` between off-blocks.
 *
 * @example
 * await runAlternating(cluster, benchSchedule(settings, (on) => sidecar.setCollecting(on)));
 */
export function benchSchedule(
  settings: { clients: number; pairs: number; blockSeconds?: number },
  switchTo: AlternatingRun['switchTo'],
): AlternatingRun {
  if (settings.blockSeconds === undefined) throw new Error('the blocks method needs blockSeconds');
  return {
    clients: settings.clients,
    pairs: settings.pairs,
    blockSeconds: settings.blockSeconds,
    settleSeconds: SETTLE_SECONDS,
    initiallyOn: true,
    switchTo,
  };
}

/**
 * Runs the load and the switching schedule (settle, then off, on, off, ..., off) and returns
 * the block ratios, with what the run saw for checking: samples, switches and blocks.
 */
export async function runAlternating(
  cluster: ThrowawayCluster,
  run: AlternatingRun,
): Promise<{ ratios: BlockRatio[]; blocks: Block[]; samples: ProgressSample[]; toggles: Toggle[]; transactions: number }> {
  const switches = 2 * run.pairs + 1;
  const seconds = run.settleSeconds + switches * run.blockSeconds + 1;
  const startedAt = Date.now() / 1000;
  const load = runSelectOnlyWithProgress(cluster, { clients: run.clients, seconds });
  const toggles: Toggle[] = [];
  const sleepUntil = (at: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, at * 1000 - Date.now())));
  let failure: unknown = null;
  void load.catch((error: unknown) => (failure = error));
  for (let i = 0; i < switches && failure === null; i++) {
    await sleepUntil(startedAt + run.settleSeconds + i * run.blockSeconds);
    const on = i % 2 === 1;
    toggles.push({ at: Date.now() / 1000, on });
    await run.switchTo(on);
  }
  const { samples, transactions } = await load;
  if (!samples.length || Math.abs(samples[0]!.at - startedAt) > 30) {
    throw new Error(`pgbench progress timestamps (first ${samples[0]?.at}) do not match the clock (${startedAt.toFixed(1)})`);
  }
  const blocks = splitBlocks(samples, toggles, run.initiallyOn);
  return { ratios: blockRatios(blocks), blocks, samples, toggles, transactions };
}
