import type { SchemaMigration } from './schema-migrations';

// What `Dialect.doctorFacts` reads of the database for `queuebox doctor` and the database
// warnings (lib/health/database-doctor.ts turns them into warnings against the thresholds). Each
// fact that can be repaired carries the statement that repairs it, written by the dialect.

/** One QueueBox table. A figure the database does not keep cheaply is `null` (SQL Server: dead rows, autovacuum). */
export interface DoctorTableFacts {
  /** The table as the options name it (`queuebox_outbox`, `ops.queuebox_outbox`). */
  table: string;
  kind: 'outbox' | 'inbox' | 'instances';
  present: boolean;
  /** Live and dead rows by the statistics collector (estimates, no scan). */
  liveRows: number | null;
  deadRows: number | null;
  /** Size on disk of the table (pages the catalog counts), without its indexes. */
  bytes: number | null;
  /** `false` when the table's storage options turn autovacuum off; `null` where there is no autovacuum. */
  autovacuumEnabled: boolean | null;
  lastAutovacuumAt: Date | null;
  /** `VACUUM (VERBOSE) ...` of this table, where the database has one. */
  vacuum: string | null;
  /** The statement that turns the table's autovacuum back on. */
  resetAutovacuum: string | null;
}

/** One index of a QueueBox table, as the catalog has it. */
export interface DoctorIndexFacts {
  table: string;
  name: string;
  /** False for an index the planner does not use: PostgreSQL's `indisvalid` (a failed `CREATE INDEX CONCURRENTLY`), SQL Server's `is_disabled`. */
  valid: boolean;
  bytes: number | null;
  /** Rebuilds it without blocking writes, where the database can. */
  rebuild: string;
  /** Drops it (for an invalid index that is not one of QueueBox's: rebuilding a failed unique index fails again). */
  drop: string;
}

/** An index a migration this database recorded creates, with the migration's statement. */
export interface ExpectedIndex {
  table: string;
  name: string;
  migration: SchemaMigration;
  create: string;
}

/** What holds back the cleanup of dead rows (PostgreSQL's xmin horizon; SQL Server's oldest active transaction). */
export interface DoctorHorizonHolder {
  kind: 'session' | 'replication slot' | 'prepared transaction';
  /** The session's pid (session id), the slot's name, the prepared transaction's gid. */
  holder: string;
  /** Application name, slot type or owner. */
  detail: string;
  /** How long it has held it (its transaction's age), where known. */
  seconds: number | null;
  /** Transactions since its snapshot (PostgreSQL's `age(xmin)`), where known. */
  xidAge: number | null;
  /** A replication slot in use; sessions and prepared transactions count as active. */
  active: boolean;
  /** Ends it: `SELECT pg_terminate_backend(...)`, `SELECT pg_drop_replication_slot(...)`, `ROLLBACK PREPARED ...`, `KILL ...`. */
  end: string;
}

/** A session waiting now for a lock on a QueueBox table (at the moment of the read). */
export interface DoctorLockWait {
  table: string;
  /** The waiting session. */
  session: string;
  application: string;
  /** The lock mode it asks for. */
  mode: string;
  seconds: number;
  /** The sessions it waits for, and the first one described (application, state). */
  blockers: string[];
  blocker: string | null;
  /** Ends the first blocker, when there is one. */
  endBlocker: string | null;
}

export interface DoctorFacts {
  tables: DoctorTableFacts[];
  indexes: DoctorIndexFacts[];
  expectedIndexes: ExpectedIndex[];
  /** The server-wide autovacuum setting; `null` where the database has none. */
  autovacuumServer: boolean | null;
  /** The statement that turns it back on. */
  resetServerAutovacuum: string | null;
  horizon: DoctorHorizonHolder[];
  lockWaits: DoctorLockWait[];
}
