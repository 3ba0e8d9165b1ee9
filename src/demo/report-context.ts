import type pg from 'pg';
import type { ProbeSetName } from '../families/index.js';
import type { DemoFacts } from './workload-context.js';

/** What each section of the demo's report gets. */
export interface ReportContext {
  client: pg.Client;
  print(line: string): void;
  facts: DemoFacts;
  /** Probe sets attached during the workload. */
  attached: ProbeSetName[];
  /** Why each set that is not attached could not be. */
  unsupported: Partial<Record<ProbeSetName, string>>;
}
