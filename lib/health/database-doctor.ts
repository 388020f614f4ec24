import type { DataSource } from 'typeorm';
import { describeError } from '../common/errors';
import type { Dialect } from '../dialects/dialect';
import type { DoctorFacts } from '../dialects/doctor-facts';
import { dialectDriver } from '../dialects/drivers';
import { type MigrationState, readMigrationState } from '../migrations/schema-version';
import type { ResolvedQueueBoxOptions } from '../options/options.resolved';
import { doctorMessages as messages } from '../texts/doctor.messages';

/**
 * Every code a database warning can have, in the order `queuebox doctor` prints them: the
 * `queuebox_database_warnings{code}` gauge has one series per code, so its cardinality is this list.
 */
export const DATABASE_WARNING_CODES = [
  'table_missing',
  'migrations_behind',
  'migrations_ahead',
  'migrations_unchecked',
  'index_missing',
  'index_invalid',
  'autovacuum_off',
  'dead_rows',
  'index_bloat',
  'xmin_horizon',
  'lock_wait',
  'clock_skew',
  'listen_unavailable',
  'check_failed',
] as const;

export type DatabaseWarningCode = (typeof DATABASE_WARNING_CODES)[number];

/**
 * `error`: QueueBox cannot work as it should (`queuebox doctor` exits 1); `warning`: it works, at
 * a cost the message names; `info`: something the doctor could not compare.
 */
export type DatabaseWarningSeverity = 'error' | 'warning' | 'info';

/** One finding of the doctor. */
export interface DatabaseWarning {
  code: DatabaseWarningCode;
  severity: DatabaseWarningSeverity;
  /**
   * Fatal: the health check is down for it, liveness and readiness included (a process that
   * starts now would refuse to: a table missing, a required migration not run). Every other
   * warning leaves health up, `degraded`.
   */
  fatal: boolean;
  /** What it is about: a table, an index, a session, a migration; `null` for the whole database or host. */
  subject: string | null;
  message: string;
  /** The statement (or command) that repairs it, when one can; read it before running it. */
  repair: string | null;
}

/** What one examination found. */
export interface DoctorReport {
  checkedAt: Date;
  /** Errors first, then warnings, then infos; in code order within each. */
  warnings: DatabaseWarning[];
  /** The checks this database has no cheap source for (SQL Server: `dead_rows`, `autovacuum_off`). */
  notChecked: DatabaseWarningCode[];
}

/** The thresholds (`doctor` options, docs/doctor.md). */
export type DoctorThresholds = ResolvedQueueBoxOptions['doctor'];

export interface DoctorInput {
  dialect: Dialect;
  dataSource: DataSource;
  options: ResolvedQueueBoxOptions;
  /** The app's notification state (`QueueBoxHealthReport.notifications`). */
  notifications?: 'listening' | 'polling' | 'off';
  /** The CLI's: whether a notification it sent arrived within `timeoutMs` (`Dialect.notificationsArrive`). */
  notificationProbe?: { arrived: boolean; timeoutMs: number };
}

const SEVERITY_ORDER: Record<DatabaseWarningSeverity, number> = { error: 0, warning: 1, info: 2 };

/**
 * Examines the database of one QueueBox: the recorded migrations, the tables and their indexes,
 * dead rows and bloat, autovacuum, what holds the xmin horizon, lock waits on the tables, this
 * host's clock against the database's, and (in the app) LISTEN. A few catalog and statistics
 * queries, each bounded; nothing is scanned, locked or changed. A read that fails becomes a
 * `check_failed` warning; the others still run.
 */
export async function examineDatabase(input: DoctorInput): Promise<DoctorReport> {
  const { dialect, dataSource, options } = input;
  const limits = options.doctor;
  const warnings: DatabaseWarning[] = [];
  const warn = (w: Omit<DatabaseWarning, 'fatal'> & { fatal?: boolean }) => warnings.push({ fatal: false, ...w });
  const notChecked = new Set<DatabaseWarningCode>();

  let migrations: MigrationState | undefined;
  try {
    migrations = await readMigrationState(dataSource, options);
  } catch (error) {
    warn({
      code: 'check_failed',
      severity: 'error',
      subject: 'migrations',
      message: messages.checkFailed('the migrations', describeError(error)),
      repair: null,
    });
  }
  const migrate = migrations ? messages.migrateCommand(migrations.migrationsTable) : null;
  if (migrations && !migrations.checked) {
    warn({
      code: 'migrations_unchecked',
      severity: 'info',
      subject: null,
      message: messages.migrationsUnchecked(migrations.migrationsTable),
      repair: null,
    });
  }
  const required = migrations?.behind.filter((entry) => entry.required) ?? [];
  if (migrations && required.length > 0) {
    warn({
      code: 'migrations_behind',
      severity: 'error',
      fatal: true,
      subject: required.map((entry) => entry.name).join(', '),
      message: messages.migrationsBehind(
        required.map((entry) => entry.name),
        migrations.migrationsTable,
      ),
      repair: migrate,
    });
  }
  for (const entry of migrations?.behind.filter((e) => !e.required) ?? []) {
    warn({
      code: 'migrations_behind',
      severity: 'warning',
      subject: entry.name,
      message: messages.migrationBehindOptional(entry.name, entry.consequence ?? ''),
      repair: migrate,
    });
  }
  if (migrations && migrations.ahead.length > 0) {
    warn({
      code: 'migrations_ahead',
      severity: 'warning',
      subject: migrations.ahead.join(', '),
      message: messages.migrationsAhead(migrations.ahead),
      repair: null,
    });
  }

  let facts: DoctorFacts | undefined;
  try {
    facts = await dialect.doctorFacts({ applied: migrations?.applied ?? [] });
  } catch (error) {
    warn({
      code: 'check_failed',
      severity: 'error',
      subject: 'catalog',
      message: messages.checkFailed('the catalog and statistics views', describeError(error)),
      repair: null,
    });
  }
  if (facts) examineFacts(facts, limits, warn, notChecked, migrate);

  try {
    const before = Date.now();
    const databaseNow = (await dialect.clockNow()).getTime();
    const after = Date.now();
    // Positive: the database is ahead of this host. The round trip bounds what the comparison can tell.
    const skewMs = databaseNow - (before + after) / 2;
    if (Math.abs(skewMs) > limits.clockSkewMs + (after - before) / 2) {
      warn({ code: 'clock_skew', severity: 'warning', subject: null, message: messages.clockSkew(skewMs), repair: null });
    }
  } catch (error) {
    warn({
      code: 'check_failed',
      severity: 'error',
      subject: 'clock',
      message: messages.checkFailed('the database clock', describeError(error)),
      repair: null,
    });
  }

  if (input.notifications === 'polling') {
    warn({ code: 'listen_unavailable', severity: 'warning', subject: null, message: messages.listenUnavailable(), repair: null });
  } else if (input.notificationProbe?.arrived === false) {
    const message = messages.listenUnavailable(input.notificationProbe.timeoutMs);
    warn({ code: 'listen_unavailable', severity: 'warning', subject: null, message, repair: null });
  }

  const order = (code: DatabaseWarningCode) => DATABASE_WARNING_CODES.indexOf(code);
  warnings.sort((a, b) => SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity] || order(a.code) - order(b.code));
  return { checkedAt: new Date(), warnings, notChecked: [...notChecked].sort((a, b) => order(a) - order(b)) };
}

function examineFacts(
  facts: DoctorFacts,
  limits: DoctorThresholds,
  warn: (w: Omit<DatabaseWarning, 'fatal'> & { fatal?: boolean }) => void,
  notChecked: Set<DatabaseWarningCode>,
  migrate: string | null,
): void {
  for (const table of facts.tables.filter((t) => !t.present)) {
    warn({
      code: 'table_missing',
      severity: 'error',
      fatal: true,
      subject: table.table,
      message: messages.tableMissing(table.table),
      repair: migrate,
    });
  }
  const present = facts.tables.filter((t) => t.present);
  const indexNames = new Set(facts.indexes.map((index) => index.name));
  for (const expected of facts.expectedIndexes) {
    if (!present.some((t) => t.table === expected.table) || indexNames.has(expected.name)) continue;
    warn({
      code: 'index_missing',
      severity: 'error',
      subject: expected.name,
      message: messages.indexMissing(expected.name, expected.table, expected.migration, /^CREATE UNIQUE /.test(expected.create)),
      repair: expected.create,
    });
  }
  const expectedNames = new Set(facts.expectedIndexes.map((index) => index.name));
  for (const index of facts.indexes.filter((i) => !i.valid)) {
    // One of QueueBox's is rebuilt; another (a unique index whose concurrent build failed on
    // duplicates would fail again) is dropped, to be made again once its cause is fixed.
    const ours = expectedNames.has(index.name);
    warn({
      code: 'index_invalid',
      severity: 'error',
      subject: index.name,
      message: messages.indexInvalid(index.name, index.table, ours),
      repair: ours ? index.rebuild : index.drop,
    });
  }

  if (facts.autovacuumServer === false) {
    warn({
      code: 'autovacuum_off',
      severity: 'warning',
      subject: null,
      message: messages.serverAutovacuumOff(),
      repair: facts.resetServerAutovacuum,
    });
  }
  for (const table of present) {
    if (table.autovacuumEnabled === null) notChecked.add('autovacuum_off');
    else if (!table.autovacuumEnabled) {
      warn({
        code: 'autovacuum_off',
        severity: 'warning',
        subject: table.table,
        message: messages.autovacuumOff(table.table),
        repair: table.resetAutovacuum,
      });
    }
    if (table.deadRows === null || table.liveRows === null) {
      notChecked.add('dead_rows');
      continue;
    }
    const total = table.deadRows + table.liveRows;
    const percent = total === 0 ? 0 : Math.round((table.deadRows * 100) / total);
    if (table.deadRows >= limits.minDeadRows && table.deadRows > 0 && percent >= limits.deadRowsPercent) {
      warn({
        code: 'dead_rows',
        severity: 'warning',
        subject: table.table,
        message: messages.deadRows(table.table, table.deadRows, table.liveRows, percent),
        repair: table.vacuum,
      });
    }
  }
  for (const index of facts.indexes.filter((i) => i.valid && i.bytes !== null)) {
    const live = present.find((t) => t.table === index.table)?.liveRows ?? null;
    const size = index.bytes as number;
    if (live === null || size < limits.minIndexBytes || size / Math.max(live, 1) < limits.indexBytesPerRow) continue;
    warn({
      code: 'index_bloat',
      severity: 'warning',
      subject: index.name,
      message: messages.indexBloat(index.name, index.table, size, live),
      repair: index.rebuild,
    });
  }

  // Dead rows of the claimed tables: what a held horizon keeps, and claims skip.
  const claimed = present.filter((t) => t.kind !== 'instances');
  const dead = claimed.some((t) => t.deadRows === null) ? null : claimed.reduce((sum, t) => sum + (t.deadRows ?? 0), 0);
  for (const holder of facts.horizon) {
    const slot = holder.kind === 'replication slot';
    const held = holder.seconds;
    if (slot ? holder.active : held === null || held * 1000 < limits.xminHorizonMs) continue;
    const blocks = slot
      ? messages.inactiveSlot()
      : dead === null
        ? messages.xminMayBlockClaims()
        : dead > 0
          ? messages.xminBlocksClaims(dead)
          : messages.xminBlocksNothingYet();
    warn({
      code: 'xmin_horizon',
      severity: 'warning',
      subject: `${holder.kind} ${holder.holder}`,
      message: messages.xminHorizon(holder.kind, holder.holder, holder.detail, held, holder.xidAge, blocks),
      repair: holder.end,
    });
  }
  for (const wait of facts.lockWaits.filter((w) => w.seconds * 1000 >= limits.lockWaitMs)) {
    warn({
      code: 'lock_wait',
      severity: 'warning',
      subject: `${wait.table} session ${wait.session}`,
      message: messages.lockWait(wait.session, wait.application, wait.mode, wait.table, wait.seconds, wait.blocker),
      repair: wait.endBlocker,
    });
  }
}

/** The checks a database cannot run, said once (`queuebox doctor`). */
export function notCheckedLine(report: DoctorReport, dataSource: DataSource): string | null {
  return report.notChecked.length === 0 ? null : messages.notChecked(report.notChecked, dialectDriver(dataSource.options.type).displayName);
}
