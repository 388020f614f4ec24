/** QueueBox's numbered migrations: the same fourteen on every database (a driver may make one a no-op). */

/**
 * Which migration's statements: 001 (the tables), 002 (the operations indexes), 003 (the claims'
 * indexes), 004 (binary collation of the compared key columns), 005 (the claim functions of an
 * earlier version; nothing now, 006 writes them), 006 (the instances table, the claim owner
 * columns and, on PostgreSQL, the claim functions of this version), 007 (PostgreSQL's claim
 * functions rewritten with this version's head probes; nothing on SQL Server), 008 (the rate limit
 * buckets of `outbox.rateLimits`), 009 (when a lease was last renewed, and each instance row's
 * heartbeat count), 010 (the paused destinations and sources), 011 (the attempt history tables
 * and the dead letters' fingerprint), 012 (PostgreSQL's claim functions rewritten to claim rows
 * without a key without the claim lock; nothing on SQL Server) or 013 (PostgreSQL's claim
 * functions rewritten so that keyed claims lock the keys they take instead of the whole claim lock;
 * nothing on SQL Server) or 014 (PostgreSQL's claim functions set to plan with their indexes
 * whatever the table held when a session first called them; nothing on SQL Server).
 */
export type SchemaMigration =
  | 'schema'
  | 'operations'
  | 'claims'
  | 'keyCollation'
  | 'claimFunctions'
  | 'instances'
  | 'claimProbes'
  | 'rateLimits'
  | 'renewals'
  | 'pauses'
  | 'attempts'
  | 'unkeyedClaims'
  | 'keyedClaims'
  | 'claimPlans';

/** The QueueBox migrations in the order they run. */
export const SCHEMA_MIGRATIONS: readonly SchemaMigration[] = [
  'schema',
  'operations',
  'claims',
  'keyCollation',
  'claimFunctions',
  'instances',
  'claimProbes',
  'rateLimits',
  'renewals',
  'pauses',
  'attempts',
  'unkeyedClaims',
  'keyedClaims',
  'claimPlans',
];

/** The shipped migrations' names (each factory takes another `name` for a second QueueBox schema). */
export const DEFAULT_MIGRATION_NAMES = {
  schema: 'QueueBoxSchema1764460800000',
  operations: 'QueueBoxOperations1764633600000',
  claims: 'QueueBoxClaims1795996800000',
  keyCollation: 'QueueBoxKeyCollation1796083200000',
  claimFunctions: 'QueueBoxClaimFunctions1796169600000',
  instances: 'QueueBoxInstances1796256000000',
  claimProbes: 'QueueBoxClaimProbes1796342400000',
  rateLimits: 'QueueBoxRateLimits1796428800000',
  renewals: 'QueueBoxRenewals1796515200000',
  pauses: 'QueueBoxPauses1796601600000',
  attempts: 'QueueBoxAttempts1796688000000',
  unkeyedClaims: 'QueueBoxUnkeyedClaims1796774400000',
  keyedClaims: 'QueueBoxKeyedClaims1796860800000',
  claimPlans: 'QueueBoxClaimPlans1796947200000',
} as const satisfies Record<SchemaMigration, string>;

/** Each migration's `sql/<dialect>/` file stem and what a script's first line calls it. */
export const MIGRATION_FILES = {
  schema: { file: '001_queuebox', title: 'schema' },
  operations: { file: '002_queuebox_operations', title: 'operations indexes' },
  claims: { file: '003_queuebox_claims', title: 'claims indexes' },
  keyCollation: { file: '004_queuebox_key_collation', title: 'key collation' },
  claimFunctions: { file: '005_queuebox_claim_functions', title: 'claim functions (moved to 006)' },
  instances: { file: '006_queuebox_instances', title: 'instances, claim owners and claim functions' },
  claimProbes: { file: '007_queuebox_claim_probes', title: 'claim functions with index-bound head probes' },
  rateLimits: { file: '008_queuebox_rate_limits', title: 'rate limit buckets' },
  renewals: { file: '009_queuebox_renewals', title: 'lease renewal times and heartbeat counts' },
  pauses: { file: '010_queuebox_pauses', title: 'paused destinations and sources' },
  attempts: { file: '011_queuebox_attempts', title: 'attempt history and dead-letter fingerprints' },
  unkeyedClaims: { file: '012_queuebox_unkeyed_claims', title: 'claim functions that claim unkeyed rows without the claim lock' },
  keyedClaims: { file: '013_queuebox_keyed_claims', title: 'claim functions whose keyed claims lock keys, not the claim lock' },
  claimPlans: { file: '014_queuebox_claim_plans', title: 'claim functions that plan with their indexes whatever the table held' },
} as const satisfies Record<SchemaMigration, { file: string; title: string }>;

/**
 * What migration 005's scripts say on every database: it wrote PostgreSQL's claim functions in the
 * version that shipped it; they now come with 006, whose claims record their instance.
 */
export const CLAIM_FUNCTIONS_MIGRATION_NOTE =
  '-- Nothing to do: the version that shipped this migration wrote the PostgreSQL claim functions here; they now\n-- come with migration 006 (instances), whose claims record the claiming instance. Kept so the numbers stay.';
