/** QueueBox's numbered migrations: the same four on every database (a driver may make one a no-op). */

/**
 * Which migration's statements: 001 (the tables), 002 (the operations indexes), 003 (the claims'
 * indexes and functions) or 004 (binary collation of the compared key columns).
 */
export type SchemaMigration = 'schema' | 'operations' | 'claims' | 'keyCollation';

/** The QueueBox migrations in the order they run. */
export const SCHEMA_MIGRATIONS: readonly SchemaMigration[] = ['schema', 'operations', 'claims', 'keyCollation'];

/** The shipped migrations' names (each factory takes another `name` for a second QueueBox schema). */
export const DEFAULT_MIGRATION_NAMES = {
  schema: 'QueueBoxSchema1764460800000',
  operations: 'QueueBoxOperations1764633600000',
  claims: 'QueueBoxClaims1795996800000',
  keyCollation: 'QueueBoxKeyCollation1796083200000',
} as const satisfies Record<SchemaMigration, string>;
