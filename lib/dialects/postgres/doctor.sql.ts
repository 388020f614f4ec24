import type { QueueBoxTables } from '../dialect';
import type { ExpectedIndex } from '../doctor-facts';
import type { SchemaMigration } from '../schema-migrations';
import { postgresMigrations } from './migrations';
import { pgLiteral, pgTable } from './quoting';

// What `queuebox doctor` and the database warnings read (lib/dialects/doctor-facts.ts), and the
// statements that repair what they find. Catalog and statistics views only: no table is scanned
// or locked (sizes come from pg_class.relpages, not pg_relation_size, which would wait behind an
// ACCESS EXCLUSIVE lock on the very table it measures), and every list is bounded.

/**
 * $1 = the tables (quoted names, as the dialect writes them), in order. One row per table: whether
 * it exists, live and dead rows (statistics collector), its size, whether its storage options turn
 * autovacuum off, its last autovacuum.
 */
export const doctorTablesSql = () => `SELECT t.name AS "table", c.oid IS NOT NULL AS present,
       s.n_live_tup::bigint AS live_rows, s.n_dead_tup::bigint AS dead_rows,
       c.relpages::bigint * current_setting('block_size')::bigint AS bytes,
       NOT EXISTS (SELECT 1 FROM unnest(c.reloptions) AS o(option)
                   WHERE o.option ~* '^autovacuum_enabled=(false|off|no|f|n|0)$') AS autovacuum_enabled,
       s.last_autovacuum
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, n)
LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
ORDER BY t.n`;

/** $1 = the tables. Every index on them: its name (schema-qualified, quoted), whether the planner may use it, its size. */
export const doctorIndexesSql = () => `SELECT t.name AS "table", i.relname AS name,
       quote_ident(n.nspname) || '.' || quote_ident(i.relname) AS qualified,
       x.indisvalid AND x.indisready AS valid,
       i.relpages::bigint * current_setting('block_size')::bigint AS bytes
FROM unnest($1::text[]) AS t(name)
JOIN pg_index x ON x.indrelid = to_regclass(t.name)
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_namespace n ON n.oid = i.relnamespace
ORDER BY 1, 2`;

/** The server's autovacuum setting (`on` or `off`). */
export const doctorSettingsSql = () => "SELECT current_setting('autovacuum') AS autovacuum";

/**
 * What holds the xmin horizon back, the oldest three of each kind: sessions of this database with
 * a snapshot (`backend_xmin`; autovacuum's own workers left out), replication slots holding an
 * xmin, prepared transactions. `seconds`: how long the session's transaction (or the prepared one)
 * has been open.
 */
export const doctorHorizonSql = () => `(SELECT 'session' AS kind, a.pid::text AS holder,
        coalesce(nullif(a.application_name, ''), a.backend_type) || ' (' || coalesce(a.state, 'unknown') || ')' AS detail,
        EXTRACT(EPOCH FROM clock_timestamp() - coalesce(a.xact_start, a.query_start))::float8 AS seconds,
        age(a.backend_xmin)::bigint AS xid_age, true AS active
 FROM pg_stat_activity a
 WHERE a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
   AND a.datname = current_database() AND a.backend_type <> 'autovacuum worker'
 ORDER BY age(a.backend_xmin) DESC, a.xact_start LIMIT 3)
UNION ALL
(SELECT 'replication slot', s.slot_name::text, s.slot_type, NULL,
        greatest(age(s.xmin), age(s.catalog_xmin))::bigint, s.active
 FROM pg_replication_slots s
 WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
 ORDER BY 5 DESC LIMIT 3)
UNION ALL
(SELECT 'prepared transaction', p.gid, p.owner::text,
        EXTRACT(EPOCH FROM clock_timestamp() - p.prepared)::float8, age(p.transaction)::bigint, true
 FROM pg_prepared_xacts p
 WHERE p.database = current_database()
 ORDER BY 5 DESC LIMIT 3)`;

/**
 * $1 = the tables. Sessions waiting now for a lock on one of them (table or tuple locks), the
 * longest waits first, at most ten: the mode asked for, how long, and whom they wait for.
 */
export const doctorLockWaitsSql = () => `SELECT t.name AS "table", w.pid::text AS session,
       coalesce(w.application_name, '') AS application, l.mode,
       EXTRACT(EPOCH FROM clock_timestamp() - coalesce(w.state_change, w.query_start))::float8 AS seconds,
       pg_blocking_pids(w.pid)::text[] AS blockers,
       (SELECT coalesce(nullif(b.application_name, ''), b.backend_type) || ' (pid ' || b.pid || ', ' || coalesce(b.state, 'unknown') || ')'
        FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(w.pid))[1]) AS blocker
FROM unnest($1::text[]) AS t(name)
JOIN pg_locks l ON l.relation = to_regclass(t.name) AND NOT l.granted
JOIN pg_stat_activity w ON w.pid = l.pid
ORDER BY seconds DESC
LIMIT 10`;

/** Repairs, each one statement as an operator would run it. */
export const doctorRepairs = {
  vacuum: (table: string) => `VACUUM (VERBOSE, ANALYZE) ${table}`,
  resetAutovacuum: (table: string) => `ALTER TABLE ${table} RESET (autovacuum_enabled)`,
  serverAutovacuum: () => 'ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf()',
  rebuildIndex: (qualifiedIndex: string) => `REINDEX INDEX CONCURRENTLY ${qualifiedIndex}`,
  dropIndex: (qualifiedIndex: string) => `DROP INDEX CONCURRENTLY ${qualifiedIndex}`,
  endSession: (pid: string) => `SELECT pg_terminate_backend(${Number(pid)})`,
  dropSlot: (slot: string) => `SELECT pg_drop_replication_slot(${pgLiteral(slot)})`,
  rollbackPrepared: (gid: string) => `ROLLBACK PREPARED ${pgLiteral(gid)}`,
};

const CREATE_INDEX = /^CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?(?:IF NOT EXISTS )?"([^"]+)" ON (\S+)/;
const DROP_INDEX = /^DROP INDEX (?:CONCURRENTLY )?(?:IF EXISTS )?(?:"[^"]+"\.)?"([^"]+)"/;

/**
 * The indexes the migrations in `applied` leave on the three tables, read from their own
 * statements (a later migration's DROP INDEX removes one an earlier one created), each with the
 * CREATE statement that makes it again.
 */
export function expectedIndexes(tables: QueueBoxTables, applied: readonly SchemaMigration[]): ExpectedIndex[] {
  const byName = new Map<string, ExpectedIndex>();
  const kinds = ['outbox', 'inbox', 'instances'] as const;
  const tableOf = (sqlName: string) => kinds.find((kind) => pgTable(tables[kind]) === sqlName);
  for (const migration of applied) {
    for (const statement of postgresMigrations[migration].up(tables).map((s) => s.trim())) {
      const created = CREATE_INDEX.exec(statement);
      const kind = created ? tableOf(created[2]) : undefined;
      if (created && kind) byName.set(created[1], { table: tables[kind].qualified, name: created[1], migration, create: statement });
      const dropped = DROP_INDEX.exec(statement);
      if (dropped) byName.delete(dropped[1]);
    }
  }
  return [...byName.values()];
}
