import type { VerifyCheck } from './verify.checks';
import { verifyMessages as say } from './verify.messages';
import type { VerifyDefect, VerifyPath, VerifyScenario } from './verify.options';
import type { FaultRecord, SkippedFault } from './verify.records';

/** What a verify run found: the verdict, each check with its figure and failures, and the settings it ran with. */
export interface VerifyReport {
  /** FAIL when any check failed. */
  verdict: 'PASS' | 'FAIL';
  /** The queuebox package's version. */
  version: string;
  startedAt: string;
  durationMs: number;
  database: {
    /** TypeORM's driver type (`postgres`, `mssql`). */
    type: string;
    displayName: string;
    /** The URL, its password masked. */
    url: string;
    /** The server's version and settings, as the database reports them. */
    settings: Record<string, string>;
  };
  /** The settings the run used. */
  settings: {
    workers: number;
    pool: number;
    leaseMs: number;
    publishTimeoutMs: number;
    shutdownTimeoutMs: number;
    heartbeatMs: number;
    deadAfterMs: number;
    maxAttempts: number;
    seconds: number;
    rate: number;
    keys: number;
    slowPercent: number;
    scenarios: VerifyScenario[];
    tables: string;
    node: string;
  };
  /** The self-test's defect, when one was injected: the run says nothing about the database then. */
  defect?: VerifyDefect;
  produced: { total: number; byPath: Record<VerifyPath, number>; poison: number; outOfOrderPairs: number };
  deliveries: number;
  faults: (Omit<FaultRecord, 'held'> & { held: number })[];
  skipped: SkippedFault[];
  drain: { drained: boolean; ms: number; boundMs: number };
  checks: VerifyCheck[];
  /** Node.js warnings the workers printed, each with the workers that printed it (no check: a lead to follow). */
  warnings: { warning: string; workers: string[] }[];
  /** The workers' last lines of output, when the run failed. */
  workerOutput?: Record<string, string[]>;
  /** Whether the run's tables were dropped at its end (set once its clean-up ended). */
  tablesDropped: boolean;
}

/** How many failures of a check the text report shows (the JSON file has every one). */
const SHOWN_FAILURES = 5;

/** The checks' lines and the verdict, as the CLI prints them after the run. */
export function reportLines(report: VerifyReport, jsonFile?: string): string[] {
  const lines: string[] = [];
  const byPath = Object.entries(report.produced.byPath)
    .map(([path, count]) => `${path} ${count}`)
    .join(', ');
  lines.push(say.produced(report.produced.total, byPath, report.produced.poison, report.produced.outOfOrderPairs));
  lines.push(say.faultsLine(faultSummary(report) || 'none'));
  for (const skipped of report.skipped) lines.push(say.checkLine('SKIP', skipped.fault, skipped.reason));
  for (const { warning, workers } of report.warnings) lines.push(say.workerWarning(warning, workers));
  for (const check of report.checks) {
    lines.push(say.checkLine(check.status, check.name, check.figure));
    for (const failure of check.failures.slice(0, SHOWN_FAILURES)) lines.push(say.failureLine(failure));
    if (check.failures.length > SHOWN_FAILURES) lines.push(say.moreFailures(check.failures.length - SHOWN_FAILURES, jsonFile));
  }
  if (report.defect) lines.push(say.defectBanner(report.defect));
  lines.push(
    say.verdict(
      report.verdict,
      report.checks.filter((check) => check.status !== 'SKIP').length,
      (report.durationMs / 1000).toFixed(0),
      report.tablesDropped,
    ),
  );
  return lines;
}

/** `kill x2, pause x2, sessions x1 (12 sessions), shutdown x1`. */
function faultSummary(report: VerifyReport): string {
  const counts = new Map<string, number>();
  let sessions = 0;
  for (const fault of report.faults) {
    counts.set(fault.kind, (counts.get(fault.kind) ?? 0) + 1);
    sessions += fault.sessions ?? 0;
  }
  return [...counts].map(([kind, count]) => `${kind} x${count}${kind === 'sessions' ? ` (${sessions} sessions ended)` : ''}`).join(', ');
}

/** The settings lines printed before the run. */
export function settingsLines(report: Pick<VerifyReport, 'database' | 'settings'>): string[] {
  const database = Object.entries(report.database.settings)
    .filter(([name]) => name !== 'version')
    .map(([name, value]) => `${name}=${value}`)
    .join(', ');
  const s = report.settings;
  return [
    say.settingsLine('Database', database),
    say.settingsLine(
      'QueueBox',
      `${s.workers} workers, pool ${s.pool} each, lease ${s.leaseMs} ms, publishTimeout ${s.publishTimeoutMs} ms, shutdownTimeoutMs ${s.shutdownTimeoutMs}, heartbeatMs ${s.heartbeatMs}, deadAfterMs ${s.deadAfterMs}, maxAttempts ${s.maxAttempts}; tables ${s.tables}; Node.js ${s.node}`,
    ),
  ];
}
