// The texts of the database warnings (`queuebox doctor`, health, the dashboard, the logs): one
// place, as texts/queuebox.messages.ts is for the rest. Each says what was found, what it costs
// QueueBox, and, where a statement cannot say it, what to do.

const seconds = (value: number) => `${value < 10 ? value.toFixed(1) : Math.round(value)} s`;
const bytes = (value: number) =>
  value >= 1024 ** 3
    ? `${(value / 1024 ** 3).toFixed(1)} GiB`
    : value >= 1024 ** 2
      ? `${(value / 1024 ** 2).toFixed(1)} MiB`
      : `${Math.round(value / 1024)} KiB`;

export const doctorMessages = {
  tableMissing: (table: string) => `Table ${table} does not exist: QueueBox cannot work without it. Run the migrations.`,
  migrationsBehind: (names: string[], migrationsTable: string) =>
    `The database lacks QueueBox migration${names.length > 1 ? 's' : ''} ${names.join(', ')} (not recorded in TypeORM's "${migrationsTable}" table): this version needs ${names.length > 1 ? 'them' : 'it'}; a process that starts now refuses to.`,
  migrationBehindOptional: (name: string, consequence: string) => `QueueBox migration ${name} is not recorded: ${consequence}`,
  migrationsAhead: (names: string[]) =>
    `The database has QueueBox migration${names.length > 1 ? 's' : ''} ${names.join(', ')} that this version does not know: a newer QueueBox migrated it, and this process is older than its schema. Upgrade this app's queuebox package to the version that wrote ${names.length > 1 ? 'them' : 'it'}.`,
  migrationsUnchecked: (migrationsTable: string) =>
    `The tables exist but TypeORM's "${migrationsTable}" table does not record their first migration (created from plain SQL?): the migrations cannot be compared; apply every sql/<dialect>/NNN_*.up.sql script of this version.`,
  indexMissing: (index: string, table: string, migration: string, unique: boolean) =>
    `Index ${index} of ${table} (migration ${migration}) does not exist: ${unique ? 'the database no longer enforces the rule it guards (one row in flight per key or aggregate).' : 'the claims or admin reads it serves scan the table instead.'}`,
  indexInvalid: (index: string, table: string, ours: boolean) =>
    `Index ${index} of ${table} is not valid (a CREATE INDEX CONCURRENTLY or REINDEX that failed, or a disabled index): the planner does not use it, and writes still maintain it.${ours ? '' : " It is not one of QueueBox's: drop it, and build it again once what made it fail (duplicate keys?) is fixed."}`,
  deadRows: (table: string, dead: number, live: number, percent: number) =>
    `${table} has ${dead} dead rows (${percent}% of its rows, ${live} live): claims and admin reads step over them in the indexes until a vacuum removes them.`,
  indexBloat: (index: string, table: string, size: number, live: number) =>
    `Index ${index} of ${table} takes ${bytes(size)} for ${live} live rows of its table: most of it is empty pages left by finished rows; rebuilding it shrinks it.`,
  autovacuumOff: (table: string) =>
    `Autovacuum is off for ${table} (storage option autovacuum_enabled=false): its dead rows, one per finished or retried message, are never cleaned up by themselves.`,
  serverAutovacuumOff: () => 'Autovacuum is off for the whole server (autovacuum = off): no QueueBox table is cleaned up by itself.',
  xminHorizon: (kind: string, holder: string, detail: string, held: number | null, xidAge: number | null, blocks: string) =>
    `A ${kind} (${holder}${detail ? `, ${detail}` : ''}) holds back the cleanup of dead rows${held === null ? '' : ` for ${seconds(held)}`}${xidAge === null ? '' : ` (${xidAge} transactions since its snapshot)`}: ${blocks}`,
  xminBlocksClaims: (dead: number) =>
    `it blocks claims: the ${dead} dead rows of the outbox and inbox (and every row finished from now on) stay until it ends, and each claim must skip them in the claim indexes, so claims slow down the longer it lasts.`,
  xminBlocksNothingYet: () =>
    'no dead rows of the outbox or inbox wait for it yet, but every row finished from now on stays until it ends, and claims must skip those.',
  xminMayBlockClaims: () => 'the row versions and deleted rows of the QueueBox tables stay until it ends, and claims must skip them.',
  inactiveSlot: () => 'an inactive replication slot never lets it go: drop the slot if nothing will use it again.',
  lockWait: (session: string, application: string, mode: string, table: string, waited: number, blocker: string | null) =>
    `Session ${session}${application ? ` (${application})` : ''} waits ${seconds(waited)} for a ${mode} lock on ${table}${blocker ? `, held by ${blocker}` : ''}: QueueBox's claims and finishing writes on this table wait behind it.`,
  clockSkew: (skewMs: number) =>
    `This host's clock is ${Math.abs(Math.round(skewMs))} ms ${skewMs > 0 ? 'behind' : 'ahead of'} the database's (compared with the database clock, round trip halved): leases and fences use the database clock, but times this host sets (availableAt, Retry-After dates, the dashboard's time filters) are off by as much. Synchronize the host's clock (NTP).`,
  listenUnavailable: (probedMs?: number) =>
    probedMs === undefined
      ? 'LISTEN is unavailable: the notification connection is down (or refused: a pooler in transaction mode has no LISTEN), so workers find new messages only at each pollIntervalMs instead of at once.'
      : `LISTEN is unavailable: a notification sent through this database URL did not arrive within ${probedMs} ms (a pooler in transaction mode hands the LISTEN session back after each statement), so the workers of an app that connects through it find new messages only at each pollIntervalMs instead of at once.`,
  checkFailed: (what: string, detail: string) => `The doctor could not read ${what}: ${detail}`,
  notChecked: (checks: string[], database: string) =>
    `Not checked on ${database}: ${checks.join(', ')} (no cheap source of it there; see docs/doctor.md).`,
  warningAppeared: (code: string, message: string) => `Database warning ${code}: ${message}`,
  warningCleared: (code: string, subject: string | null) => `Database warning ${code}${subject ? ` (${subject})` : ''} cleared.`,
  migrateCommand: (migrationsTable: string) =>
    `npx --no-install queuebox migrate${migrationsTable === 'migrations' ? '' : ` --migrations-table ${migrationsTable}`}`,
};
