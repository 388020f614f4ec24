import { createDialect } from '../../core/create-dialect';
import { type DoctorReport, examineDatabase, notCheckedLine } from '../../health/database-doctor';
import { resolveOptions } from '../../options/options.resolver';
import { databaseTarget, migrationsFor, namedTables, parseTables } from '../cli-options';
import { type Command, DATABASE_OPTIONS_HELP, DEFAULT_MIGRATIONS_TABLE, databaseOptions } from '../command';
import { openDataSource } from '../connect';
import { wrapText } from '../table';

const WIDTH = 100;
/** How long the LISTEN check waits for its notification: a working LISTEN delivers it in milliseconds. */
const NOTIFICATION_PROBE_MS = 2000;

export const doctorCommand: Command = {
  name: 'doctor',
  summary: 'Check the database for what slows or stops QueueBox, with the statement that repairs it',
  help: `Usage: queuebox doctor [--json] [options]

Examines the database of the QueueBox tables, reading only catalog and statistics views (nothing is
scanned, locked or changed), and prints each warning with its code, severity, message and, where
one can, the statement that repairs it (read it before running it):

  table_missing, migrations_behind   a table or a required migration missing (error)
  migrations_ahead                   a newer QueueBox migrated this database
  migrations_unchecked               tables created from plain SQL: migrations not compared (info)
  index_missing, index_invalid       an index the migrations create is missing or not valid (error)
  autovacuum_off                     autovacuum off for a table, or the server (PostgreSQL)
  dead_rows, index_bloat             dead rows or empty index pages past the thresholds
  xmin_horizon                       a transaction, slot or prepared transaction holding back the
                                     cleanup of dead rows (and whether claims must skip them)
  lock_wait                          a session waiting for a lock on a QueueBox table now
  clock_skew                         this host's clock against the database's
  listen_unavailable                 a notification sent through this URL did not arrive within
                                     2 s: LISTEN does not work through it (PostgreSQL)
  check_failed                       a read the doctor could not make (permissions) (error)

The thresholds are the defaults of the "doctor" module option (docs/doctor.md). LISTEN is checked
by sending one notification on a channel of the doctor's own (no worker listens there).

Exit code: 0 without an error-level warning, 1 with one (or when it cannot connect), 2 usage.

Options:
${DATABASE_OPTIONS_HELP}
  --json                      Print {database, type, checkedAt, warnings, notChecked}
  -h, --help                  Show this help

Example:
  queuebox doctor --url postgres://app@db:5432/orders`,
  options: { ...databaseOptions, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  async run(values, io) {
    const target = databaseTarget(values.url as string | undefined, io.env);
    const tables = parseTables(values.tables as string | undefined);
    const migrations = migrationsFor(tables, values['migration-name'] as string | undefined);
    const migrationsTable = (values['migrations-table'] as string | undefined) ?? DEFAULT_MIGRATIONS_TABLE;
    const dataSource = await openDataSource(target, migrations.classes, migrationsTable);
    try {
      const options = resolveOptions({ tables: namedTables(tables), workers: false });
      const dialect = createDialect(dataSource, options.tables);
      const notificationProbe = dialect.notificationsArrive
        ? { arrived: await dialect.notificationsArrive(NOTIFICATION_PROBE_MS).catch(() => false), timeoutMs: NOTIFICATION_PROBE_MS }
        : undefined;
      const report = await examineDatabase({ dialect, dataSource, options, notificationProbe });
      if (values.json === true) {
        io.out(JSON.stringify({ database: target.masked, type: target.type, ...report }, null, 2));
      } else {
        io.out(`Database: ${target.masked} (${target.type})`);
        for (const line of doctorLines(report)) io.out(line);
        const notChecked = notCheckedLine(report, dataSource);
        if (notChecked) io.out(notChecked);
      }
      return report.warnings.some((warning) => warning.severity === 'error') ? 1 : 0;
    } finally {
      await dataSource.destroy();
    }
  },
};

/** The warnings as text: a head line each (severity, code, subject), the message wrapped under it, then the repair. */
export function doctorLines(report: DoctorReport): string[] {
  if (report.warnings.length === 0) return ['No database warnings.'];
  const lines: string[] = [];
  for (const w of report.warnings) {
    lines.push(`${w.severity.toUpperCase().padEnd(7)} ${w.code}${w.subject ? `  ${w.subject}` : ''}`);
    for (const line of wrapText(w.message, WIDTH, 2000)) lines.push(`        ${line}`);
    if (w.repair) for (const [i, line] of w.repair.split('\n').entries()) lines.push(`        ${i === 0 ? 'repair: ' : '        '}${line}`);
  }
  const count = (severity: string) => report.warnings.filter((w) => w.severity === severity).length;
  lines.push(`${count('error')} error(s), ${count('warning')} warning(s), ${count('info')} info.`);
  return lines;
}
