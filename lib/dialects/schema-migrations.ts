/** QueueBox's numbered migrations: the same five on every database (a driver may make one a no-op). */

/**
 * Which migration's statements: 001 (the tables), 002 (the operations indexes), 003 (the claims'
 * indexes and functions), 004 (binary collation of the compared key columns) or 005 (the claim
 * functions brought up to this version's claims).
 */
export type SchemaMigration = 'schema' | 'operations' | 'claims' | 'keyCollation' | 'claimFunctions';

/** The QueueBox migrations in the order they run. */
export const SCHEMA_MIGRATIONS: readonly SchemaMigration[] = ['schema', 'operations', 'claims', 'keyCollation', 'claimFunctions'];

/** The shipped migrations' names (each factory takes another `name` for a second QueueBox schema). */
export const DEFAULT_MIGRATION_NAMES = {
  schema: 'QueueBoxSchema1764460800000',
  operations: 'QueueBoxOperations1764633600000',
  claims: 'QueueBoxClaims1795996800000',
  keyCollation: 'QueueBoxKeyCollation1796083200000',
  claimFunctions: 'QueueBoxClaimFunctions1796169600000',
} as const satisfies Record<SchemaMigration, string>;

/** Each migration's `sql/<dialect>/` file stem and what a script's first line calls it. */
export const MIGRATION_FILES = {
  schema: { file: '001_queuebox', title: 'schema' },
  operations: { file: '002_queuebox_operations', title: 'operations indexes' },
  claims: { file: '003_queuebox_claims', title: 'claims (indexes and functions)' },
  keyCollation: { file: '004_queuebox_key_collation', title: 'key collation' },
  claimFunctions: { file: '005_queuebox_claim_functions', title: 'claim functions of this version' },
} as const satisfies Record<SchemaMigration, { file: string; title: string }>;
