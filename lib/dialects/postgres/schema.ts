import { attemptsTableOf, pausesTableOf, rateLimitsTableOf, type TableName, tableBeside } from '../../common/identifiers';
import type { QueueBoxTables } from '../dialect';
import { serverVersionCheckSql } from './checks.sql';
import {
  claimFunctionNames,
  claimFunctionPlanSettingsSql,
  claimFunctionSignature,
  createClaimFunctionsSql,
  legacyClaimFunctionSignature,
} from './claim-functions.sql';
import { pgTable } from './quoting';

/**
 * The schema, one statement per entry. Partial indexes cover only unfinished rows, so the claim,
 * head-of-key and reclaim lookups cost the same however many `sent`/`processed` rows are kept.
 */
export function postgresSchemaUp(tables: QueueBoxTables): string[] {
  const schemas = [...new Set([tables.outbox.schema, tables.inbox.schema].filter((s): s is string => !!s))];
  const outbox = pgTable(tables.outbox);
  const inbox = pgTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return [
    serverVersionCheckSql(),
    ...schemas.map((schema) => `CREATE SCHEMA IF NOT EXISTS "${schema}"`),
    `CREATE TABLE ${outbox} (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id uuid NOT NULL,
  destination text NOT NULL,
  "key" text,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  state text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  claim_token uuid,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  sent_at timestamptz,
  last_error text,
  CONSTRAINT "${o}_message_id_key" UNIQUE (message_id),
  CONSTRAINT "${o}_state_check" CHECK (state IN ('pending', 'processing', 'sent', 'dead'))
)`,
    // The claim scans available pending rows oldest first.
    `CREATE INDEX "${o}_claim_idx" ON ${outbox} (available_at, id) WHERE state = 'pending'`,
    // Finds whether a key has an earlier unfinished row (the head-of-key check).
    `CREATE INDEX "${o}_key_idx" ON ${outbox} ("key", id) WHERE state IN ('pending', 'processing') AND "key" IS NOT NULL`,
    // I4 enforced by the database itself: one row per key in flight, whatever the claim does.
    `CREATE UNIQUE INDEX "${o}_key_in_flight_idx" ON ${outbox} ("key") WHERE state = 'processing' AND "key" IS NOT NULL`,
    `CREATE INDEX "${o}_lease_idx" ON ${outbox} (lease_expires_at) WHERE state = 'processing'`,
    `CREATE TABLE ${inbox} (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  source text NOT NULL,
  idempotency_key text NOT NULL,
  aggregate_id text,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  state text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  claim_token uuid,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  received_at timestamptz NOT NULL DEFAULT now(),
  processed_at timestamptz,
  last_error text,
  CONSTRAINT "${i}_source_idempotency_key_key" UNIQUE (source, idempotency_key),
  CONSTRAINT "${i}_state_check" CHECK (state IN ('pending', 'processing', 'processed', 'dead'))
)`,
    `CREATE INDEX "${i}_claim_idx" ON ${inbox} (source, available_at, id) WHERE state = 'pending'`,
    `CREATE INDEX "${i}_aggregate_idx" ON ${inbox} (source, aggregate_id, id) WHERE state IN ('pending', 'processing') AND aggregate_id IS NOT NULL`,
    `CREATE UNIQUE INDEX "${i}_aggregate_in_flight_idx" ON ${inbox} (source, aggregate_id) WHERE state = 'processing' AND aggregate_id IS NOT NULL`,
    `CREATE INDEX "${i}_lease_idx" ON ${inbox} (source, lease_expires_at) WHERE state = 'processing'`,
  ];
}

export function postgresSchemaDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${pgTable(tables.inbox)}`, `DROP TABLE IF EXISTS ${pgTable(tables.outbox)}`];
}

/**
 * Migration 002 (operations): partial indexes on finished and dead rows, for retention's batched
 * deletes (oldest first, by `sent_at` / `processed_at`) and for the admin's dead-row counts,
 * listing, replay and discard per destination or source. Each holds one state only, so the
 * claim's indexes stay as small as before; the cost is one index entry per finished row.
 */
export function postgresOperationsUp(tables: QueueBoxTables): string[] {
  const outbox = pgTable(tables.outbox);
  const inbox = pgTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return [
    `CREATE INDEX "${o}_sent_idx" ON ${outbox} (sent_at) WHERE state = 'sent'`,
    `CREATE INDEX "${o}_dead_idx" ON ${outbox} (destination, id) WHERE state = 'dead'`,
    `CREATE INDEX "${i}_processed_idx" ON ${inbox} (processed_at) WHERE state = 'processed'`,
    `CREATE INDEX "${i}_dead_idx" ON ${inbox} (source, id) WHERE state = 'dead'`,
  ];
}

export function postgresOperationsDown(tables: QueueBoxTables): string[] {
  return [
    dropIndexSql(tables.inbox, 'dead_idx'),
    dropIndexSql(tables.inbox, 'processed_idx'),
    dropIndexSql(tables.outbox, 'dead_idx'),
    dropIndexSql(tables.outbox, 'sent_idx'),
  ];
}

/** Drops index `<table>_<name>` (an index lives in its table's schema). */
function dropIndexSql(table: QueueBoxTables['outbox'], name: string): string {
  return `DROP INDEX IF EXISTS ${pgTable(tableBeside(table, `${table.name}_${name}`))}`;
}

/**
 * Migration 003 (claims). Partial indexes of pending rows without a key (outbox) or aggregate
 * (inbox): when the oldest pending rows all belong to keys in flight, the claim finds the rows
 * without a key behind them through these, instead of reading every row of the busy keys on the
 * way (see `outboxClaimSql`). Earlier versions also created the claim functions here; they come
 * with migration 006 now, since the claims write its `claimed_by` column.
 */
export function postgresClaimsUp(tables: QueueBoxTables): string[] {
  const outbox = pgTable(tables.outbox);
  const inbox = pgTable(tables.inbox);
  return [
    `CREATE INDEX "${tables.outbox.name}_unkeyed_claim_idx" ON ${outbox} (available_at, id) WHERE state = 'pending' AND "key" IS NULL`,
    `CREATE INDEX "${tables.inbox.name}_unkeyed_claim_idx" ON ${inbox} (source, available_at, id) WHERE state = 'pending' AND aggregate_id IS NULL`,
  ];
}

export function postgresClaimsDown(tables: QueueBoxTables): string[] {
  return [
    ...dropClaimFunctionsSql(tables, legacyClaimFunctionSignature),
    dropIndexSql(tables.inbox, 'unkeyed_claim_idx'),
    dropIndexSql(tables.outbox, 'unkeyed_claim_idx'),
  ];
}

/** Drops the three claim functions of one signature, if they exist. */
export function dropClaimFunctionsSql(tables: QueueBoxTables, signature: typeof claimFunctionSignature): string[] {
  const fn = claimFunctionNames(tables);
  return (['pull', 'relay', 'outbox'] as const).map((kind) => `DROP FUNCTION IF EXISTS ${signature(kind, fn[kind])}`);
}

/**
 * Migration 004 (key collation) changes nothing on PostgreSQL: `text` columns under the database's
 * default collation, which is deterministic, compare equal only when their bytes are equal, so
 * `evt_A`, `evt_a` and `evt_a ` stay three keys. It exists so both dialects number the same
 * migrations; SQL Server's twin moves its key columns to a binary collation.
 */
export function postgresKeyCollationUp(_tables: QueueBoxTables): string[] {
  return [];
}

export function postgresKeyCollationDown(_tables: QueueBoxTables): string[] {
  return [];
}

/**
 * Migration 006 (instances). The instances table: each QueueBox process registers itself and
 * heartbeats by the database clock, so a live replica can tell a dead one and end its leases at
 * once instead of waiting for them to expire. The claim owner column `claimed_by` on both tables
 * (the instance that made the row's last claim; only a `processing` row's is read). And the three claims as PL/pgSQL
 * functions, which write it (claimFunctionSql), whose plans PostgreSQL keeps per session; the
 * functions of earlier versions (without the instance parameter) are dropped. Without the
 * functions QueueBox sends the claim statements itself.
 */
export function postgresInstancesUp(tables: QueueBoxTables): string[] {
  const instanceSchema = tables.instances.schema;
  return [
    ...(instanceSchema ? [`CREATE SCHEMA IF NOT EXISTS "${instanceSchema}"`] : []),
    `CREATE TABLE ${pgTable(tables.instances)} (
  id uuid PRIMARY KEY,
  host text NOT NULL,
  pid integer NOT NULL,
  data_source text NOT NULL,
  version text NOT NULL,
  dead_after_ms integer NOT NULL,
  started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`,
    `ALTER TABLE ${pgTable(tables.outbox)} ADD COLUMN claimed_by uuid`,
    `ALTER TABLE ${pgTable(tables.inbox)} ADD COLUMN claimed_by uuid`,
    ...dropClaimFunctionsSql(tables, legacyClaimFunctionSignature),
    ...createClaimFunctionsSql(tables),
  ];
}

/**
 * Migration 007 (claim probes): the three claim functions rewritten with this version's claims,
 * whose head probes only the key and aggregate indexes can serve (noEarlierUnfinishedOfKey), so a
 * database whose functions 006 wrote with the earlier probes claims as this version does. Until it
 * runs the dialect sees that their source differs and sends the claim statements instead. Its down
 * migration keeps them: the earlier probes could read every finished row on each claim, and 006's
 * down drops the functions anyway.
 */
export function postgresClaimProbesUp(tables: QueueBoxTables): string[] {
  return createClaimFunctionsSql(tables);
}

export function postgresClaimProbesDown(_tables: QueueBoxTables): string[] {
  return [];
}

/**
 * Migration 012 (unkeyed claims, issue 36): the three claim functions rewritten so that, while no
 * row with a key (an aggregate) is unfinished, they claim rows without one without the claim lock
 * (claimFunctions), and claims of several connections and replicas run side by side. CREATE OR
 * REPLACE FUNCTION locks nothing but the function's catalog row: claims running meanwhile finish
 * with the old source, the next ones use the new. Until it runs the dialect sees the functions
 * are an earlier version's and sends the claim statements instead (one at a time, as before).
 * Its down writes back the functions as the version before wrote them (every claim behind the lock).
 * 006 and 007 write this version's functions too, so one of them run late changes nothing.
 */
export function postgresUnkeyedClaimsUp(tables: QueueBoxTables): string[] {
  return createClaimFunctionsSql(tables);
}

export function postgresUnkeyedClaimsDown(tables: QueueBoxTables): string[] {
  return createClaimFunctionsSql(tables, { version: 'serialized' });
}

/**
 * Migration 013 (keyed claims, issue 36): the three claim functions rewritten so that keyed claims
 * take the claim lock shared and try the key lock of each head they find instead of taking the lock
 * alone (claimFunctions, tryKeyLockSql): claims of different keys run side by side across connections
 * and replicas. Locks and timing as 012's. Until it runs the dialect sees the functions are an
 * earlier version's and sends the claim statements instead (one at a time, as before), which is
 * also what 013's down leads back to: it writes back 012's functions.
 */
export function postgresKeyedClaimsUp(tables: QueueBoxTables): string[] {
  return createClaimFunctionsSql(tables);
}

export function postgresKeyedClaimsDown(tables: QueueBoxTables): string[] {
  return createClaimFunctionsSql(tables, { version: 'unkeyedWithoutLock' });
}

/**
 * Migration 014 (claim plans, issue 36): the three claim functions set to plan with their indexes
 * whatever the table held when a session first called them (claimFunctionPlanSettingsSql). ALTER
 * FUNCTION locks nothing but the function's catalog row, for milliseconds. Until it runs, a
 * session whose first claim found the table empty or never analyzed reads the table whole at
 * every claim, until the table is analyzed. Its down removes the setting.
 */
export function postgresClaimPlansUp(tables: QueueBoxTables): string[] {
  return claimFunctionPlanSettingsSql(tables, 'up');
}

export function postgresClaimPlansDown(tables: QueueBoxTables): string[] {
  return claimFunctionPlanSettingsSql(tables, 'down');
}

export function postgresInstancesDown(tables: QueueBoxTables): string[] {
  return [
    ...dropClaimFunctionsSql(tables, claimFunctionSignature),
    `ALTER TABLE ${pgTable(tables.inbox)} DROP COLUMN IF EXISTS claimed_by`,
    `ALTER TABLE ${pgTable(tables.outbox)} DROP COLUMN IF EXISTS claimed_by`,
    `DROP TABLE IF EXISTS ${pgTable(tables.instances)}`,
  ];
}

/**
 * Migration 008 (rate limits). One token bucket per rate-limited destination of
 * `outbox.rateLimits`: the tokens left when it was last refilled, and when (by the database clock,
 * so every replica shares it); `granted` is what the last take handed out (the take returns it).
 */
export function postgresRateLimitsUp(tables: QueueBoxTables): string[] {
  return [
    `CREATE TABLE ${pgTable(rateLimitsTableOf(tables.outbox))} (
  destination text PRIMARY KEY,
  tokens double precision NOT NULL,
  granted integer NOT NULL DEFAULT 0,
  refilled_at timestamptz NOT NULL
)`,
  ];
}

export function postgresRateLimitsDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${pgTable(rateLimitsTableOf(tables.outbox))}`];
}

/**
 * Migration 009 (renewals). `renewed_at` on both tables: when a renewal last moved the lease (the
 * claim writes `claimed_at`), so a replica's sweep ends only leases nobody renewed within
 * `deadAfterMs`, whatever a heartbeat looks like (a database clock step forward, a write that made
 * it look old). Written by the renewal alone: the claim functions stay as they are. `beats` on the
 * instances table: how many heartbeats the row took, which the heartbeat checks, so two live
 * processes with one id (a process cloned after start-up, a VM restored from a snapshot) find out
 * instead of beating one row. Nullable columns and a constant default change only the catalog.
 */
export function postgresRenewalsUp(tables: QueueBoxTables): string[] {
  return [
    `ALTER TABLE ${pgTable(tables.outbox)} ADD COLUMN renewed_at timestamptz`,
    `ALTER TABLE ${pgTable(tables.inbox)} ADD COLUMN renewed_at timestamptz`,
    `ALTER TABLE ${pgTable(tables.instances)} ADD COLUMN beats bigint NOT NULL DEFAULT 0`,
  ];
}

export function postgresRenewalsDown(tables: QueueBoxTables): string[] {
  return [
    `ALTER TABLE ${pgTable(tables.instances)} DROP COLUMN IF EXISTS beats`,
    `ALTER TABLE ${pgTable(tables.inbox)} DROP COLUMN IF EXISTS renewed_at`,
    `ALTER TABLE ${pgTable(tables.outbox)} DROP COLUMN IF EXISTS renewed_at`,
  ];
}

/**
 * Migration 010 (pauses; issue 40). One row per paused outbox destination (`component` 'outbox')
 * or inbox source ('inbox'): who paused it, when (by the database clock) and why. The workers read
 * the whole table once per poll interval; a resume deletes the row.
 */
export function postgresPausesUp(tables: QueueBoxTables): string[] {
  return [
    `CREATE TABLE ${pgTable(pausesTableOf(tables.outbox))} (
  component text NOT NULL CHECK (component IN ('outbox', 'inbox')),
  name text NOT NULL,
  reason text,
  paused_by text,
  paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (component, name)
)`,
  ];
}

export function postgresPausesDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${pgTable(pausesTableOf(tables.outbox))}`];
}

/**
 * Migration 011 (attempts). The attempt history (`<table>_attempts`, one per table: each failed
 * attempt's time, duration, instance, error class and message, written by the retry and
 * dead-letter statements in the same statement, the last `attemptHistory` kept per row) and
 * `fingerprint` on both tables (a dead letter's error class and normalized message, which with its
 * destination or source names its group). The nullable column changes only the catalog (a brief
 * ACCESS EXCLUSIVE lock, no rewrite, no index build). No foreign key to the table: it would refuse
 * `TRUNCATE` of the outbox and inbox; retention and discards delete a row's history with the row
 * (row ids are never reused, so a history row left behind cannot be taken for another row's).
 */
export function postgresAttemptsUp(tables: QueueBoxTables): string[] {
  const history = (table: TableName) => {
    const attempts = attemptsTableOf(table);
    return `CREATE TABLE ${pgTable(attempts)} (
  row_id bigint NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  attempt integer NOT NULL,
  failed_at timestamptz NOT NULL,
  duration_ms bigint,
  instance_id uuid,
  error_class text NOT NULL,
  error text NOT NULL,
  outcome text NOT NULL,
  CONSTRAINT "${attempts.name}_pkey" PRIMARY KEY (row_id, id),
  CONSTRAINT "${attempts.name}_outcome_check" CHECK (outcome IN ('retry', 'dead'))
)`;
  };
  return [
    `ALTER TABLE ${pgTable(tables.outbox)} ADD COLUMN fingerprint text`,
    `ALTER TABLE ${pgTable(tables.inbox)} ADD COLUMN fingerprint text`,
    history(tables.outbox),
    history(tables.inbox),
  ];
}

export function postgresAttemptsDown(tables: QueueBoxTables): string[] {
  return [
    `DROP TABLE IF EXISTS ${pgTable(attemptsTableOf(tables.inbox))}`,
    `DROP TABLE IF EXISTS ${pgTable(attemptsTableOf(tables.outbox))}`,
    `ALTER TABLE ${pgTable(tables.inbox)} DROP COLUMN IF EXISTS fingerprint`,
    `ALTER TABLE ${pgTable(tables.outbox)} DROP COLUMN IF EXISTS fingerprint`,
  ];
}
