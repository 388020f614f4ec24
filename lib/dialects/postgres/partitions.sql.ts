import { inboxKeysTableOf, messageIdsTableOf, partitionsTableOf, type TableName, tableBeside } from '../../common/identifiers';
import { ADMIN_COLUMNS, deadAt } from './columns';
import { pgLiteral, pgTable } from './quoting';
import { msAgo } from './time';

// The partitioned layout's upkeep (issue 37, docs/partitioning.md): partitions of a table by `id`
// range, created ahead, and settled once no row of theirs can be unfinished. PostgreSQL only.

/** Which table a partition upkeep keeps: its columns differ in the unique index each partition holds on its own. */
export type PartitionedKind = 'outbox' | 'inbox';

/**
 * The index each partition holds on its own: I4's net, one `processing` row per key, can only be
 * unique within a partition (a unique index of a partitioned table must contain `id`). Across
 * partitions the keyed claim's key locks hold I4 (docs/partitioning.md, decision 4).
 */
const LOCAL_UNIQUE_INDEX: Record<PartitionedKind, string> = {
  outbox: `("key") WHERE state = 'processing' AND "key" IS NOT NULL`,
  inbox: `(source, aggregate_id) WHERE state = 'processing' AND aggregate_id IS NOT NULL`,
};

/**
 * The bookkeeping of a partitioned table: `<table>_partitions`, one row per partition with its
 * `id` range [from_id, to_id), and `settled_at` once no row of it can be unfinished (no insert can
 * reach it and none of its rows is `pending` or `processing`): claims start at the first id of
 * the oldest partition not settled (the low mark).
 */
export const createPartitionsTableSql = (table: TableName) => `CREATE TABLE IF NOT EXISTS ${pgTable(partitionsTableOf(table))} (
  name text PRIMARY KEY,
  ordinal integer NOT NULL UNIQUE,
  from_id bigint NOT NULL UNIQUE,
  to_id bigint NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  settled_at timestamptz,
  CHECK (from_id < to_id)
)`;

/** $1 = lock name. One upkeep at a time per table; tried, never waited for; released with the transaction. */
export const partitionUpkeepTryLockSql = () => 'SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS locked';

/** The partitions, oldest first (by the bigint column: the text alias would order 12001 before 2001). */
export const listPartitionsSql = (table: TableName) =>
  `SELECT p.name, p.ordinal, p.from_id::text AS from_id, p.to_id::text AS to_id, p.settled_at FROM ${pgTable(partitionsTableOf(table))} p ORDER BY p.from_id`;

/**
 * The last id handed out (NULL before the first) and the current snapshot's xmax (the next
 * transaction id) and xmin (the oldest transaction still running), read in one statement: the
 * sample from which the upkeep learns the rate of ids and when a range can no longer be written.
 * $1 = the table, quoted (`pgTable`).
 */
export const idSampleSql = () => `SELECT
  pg_sequence_last_value(pg_get_serial_sequence($1, 'id')::regclass)::text AS last_id,
  pg_snapshot_xmax(pg_current_snapshot())::text AS xmax,
  pg_snapshot_xmin(pg_current_snapshot())::text AS xmin`;

/**
 * A partition for ids [from, to), made so that the parent is never locked against inserts: a table
 * of its own (its columns and defaults from the parent), its unique index of its own, a CHECK of
 * the range (which spares the attach a scan), the attach (SHARE UPDATE EXCLUSIVE on the parent:
 * inserts and claims go on), then the CHECK dropped, and its bookkeeping row. `CREATE TABLE ...
 * PARTITION OF` would take ACCESS EXCLUSIVE on the parent and wait behind every open transaction
 * with every insert queued behind it (measured: docs/partitioning.md). Run in one transaction.
 */
export function createPartitionSql(
  table: TableName,
  kind: PartitionedKind,
  partition: { name: string; ordinal: number; from: string; to: string },
): string[] {
  const parent = pgTable(table);
  const qualified = pgTable(tableBeside(table, partition.name));
  const check = `"${partition.name}_range"`;
  return [
    `CREATE TABLE ${qualified} (LIKE ${parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
    `CREATE UNIQUE INDEX ON ${qualified} ${LOCAL_UNIQUE_INDEX[kind]}`,
    `ALTER TABLE ${qualified} ADD CONSTRAINT ${check} CHECK (id >= ${partition.from} AND id < ${partition.to})`,
    `ALTER TABLE ${parent} ATTACH PARTITION ${qualified} FOR VALUES FROM (${partition.from}) TO (${partition.to})`,
    `ALTER TABLE ${qualified} DROP CONSTRAINT ${check}`,
    `INSERT INTO ${pgTable(partitionsTableOf(table))} (name, ordinal, from_id, to_id) VALUES ('${partition.name}', ${partition.ordinal}, ${partition.from}, ${partition.to})`,
  ];
}

/** A partition's table name: `<table>_p<ordinal>`, in the table's schema (within the 63 bytes PostgreSQL keeps: the table's name has at most 48). */
export const partitionName = (table: TableName, ordinal: number) => `${table.name}_p${ordinal}`;

/**
 * Whether a partition holds a row that is not finished (`pending` or `processing`): two probes of
 * the partition's partial indexes (the claim's and the lease's), however many finished rows it has.
 */
export const partitionUnfinishedSql = (table: TableName, name: string) => {
  const partition = pgTable(tableBeside(table, name));
  return `SELECT EXISTS (SELECT 1 FROM ${partition} WHERE state = 'pending') OR EXISTS (SELECT 1 FROM ${partition} WHERE state = 'processing') AS unfinished`;
};

/** $1 = partition name. Locks its bookkeeping row (a replay that unsettles it locks the same row, so neither misses the other). */
export const lockPartitionRowSql = (table: TableName) =>
  `SELECT settled_at FROM ${pgTable(partitionsTableOf(table))} WHERE name = $1 FOR UPDATE`;

/** $1 = partition name, $2 = settled (true) or not. */
export const settlePartitionSql = (table: TableName) =>
  `UPDATE ${pgTable(partitionsTableOf(table))} SET settled_at = CASE WHEN $2::boolean THEN now() END WHERE name = $1`;

/** The low mark: the first id of the oldest partition not settled (claims need look no lower); NULL without partitions. */
export const lowMarkSql = (table: TableName) =>
  `SELECT coalesce(min(from_id) FILTER (WHERE settled_at IS NULL), max(to_id))::text AS low FROM ${pgTable(partitionsTableOf(table))}`;

// Retention by dropping settled partitions (docs/partitioning.md, decision 5).

/**
 * $1 = the partition, $2 = its parent, both quoted (`pgTable`). Whether it is attached
 * (`attached`), half detached by a `DETACH ... CONCURRENTLY` that did not finish (`pending`: a
 * crash or a cancel between its two transactions), or detached (`detached`); no row when the
 * table is gone.
 */
export const partitionStateSql =
  () => `SELECT CASE WHEN i.inhrelid IS NULL THEN 'detached' WHEN i.inhdetachpending THEN 'pending' ELSE 'attached' END AS state
FROM pg_class c
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = $2::regclass
WHERE c.oid = to_regclass($1)`;

/**
 * Whether every finished row of a partition is past its retention age (database clock):
 * `$1` = finished age in ms (`sent_at`, `processed_at`), `$2` = dead age in ms, NULL to keep dead
 * rows (then any dead row keeps the partition). Each probe reads a partial index of one state.
 */
export function partitionExpiredSql(table: TableName, kind: PartitionedKind, name: string): string {
  const partition = pgTable(tableBeside(table, name));
  const finished = kind === 'outbox' ? { state: 'sent', at: 'sent_at' } : { state: 'processed', at: 'processed_at' };
  const columns = ADMIN_COLUMNS[kind];
  return `SELECT NOT EXISTS (SELECT 1 FROM ${partition} WHERE state = '${finished.state}' AND ${finished.at} >= ${msAgo('$1')})
  AND NOT EXISTS (SELECT 1 FROM ${partition} WHERE state = 'dead' AND ($2::double precision IS NULL OR ${deadAt(columns)} >= ${msAgo('$2')})) AS expired`;
}

/** Detaches a partition without locking the parent against inserts or claims; waits for the transactions that could see it. Not in a transaction. */
export const detachPartitionConcurrentlySql = (table: TableName, name: string) =>
  `ALTER TABLE ${pgTable(table)} DETACH PARTITION ${pgTable(tableBeside(table, name))} CONCURRENTLY`;

/** Ends a `DETACH ... CONCURRENTLY` that stopped half way. */
export const finalizeDetachSql = (table: TableName, name: string) =>
  `ALTER TABLE ${pgTable(table)} DETACH PARTITION ${pgTable(tableBeside(table, name))} FINALIZE`;

/** Puts a detached partition back: PostgreSQL checks its rows against the range (SHARE UPDATE EXCLUSIVE on the parent). */
export const reattachPartitionSql = (table: TableName, partition: { name: string; from: string; to: string }) =>
  `ALTER TABLE ${pgTable(table)} ATTACH PARTITION ${pgTable(tableBeside(table, partition.name))} FOR VALUES FROM (${partition.from}) TO (${partition.to})`;

/** Drops a detached partition (ACCESS EXCLUSIVE on it alone) and its bookkeeping row. Run in one transaction. */
export const dropPartitionSql = (table: TableName, name: string) => [
  `DROP TABLE ${pgTable(tableBeside(table, name))}`,
  `DELETE FROM ${pgTable(partitionsTableOf(table))} WHERE name = '${name}'`,
];

// Uniqueness that must stay global (docs/partitioning.md, decision 4). A unique index of a
// partitioned table must contain the partition key, so an outbox `message_id` and an inbox
// `(source, idempotency_key)` are kept unique in a side table of their own, written in the same
// statement as the row. Each side row holds its row's `id` (`row_id`): a duplicate's row is found
// with one probe, however many partitions there are. The row's id is taken from the table's own
// sequence before the side row is written, so that a duplicate never reaches the partitioned table.

/**
 * A partitioned table's side table: `<outbox>_message_ids` or `<inbox>_keys`. Its key keeps the
 * plain layout's constraint name, so a duplicate raises the unique violation the dialect already
 * recognises (`<outbox>_message_id_key`).
 */
export function createSideTableSql(table: TableName, kind: PartitionedKind): string {
  const key = sideKey(table, kind);
  const columns = kind === 'outbox' ? 'message_id uuid NOT NULL' : 'source text NOT NULL,\n  idempotency_key text NOT NULL';
  return `CREATE TABLE IF NOT EXISTS ${pgTable(sideTableOf(table, kind))} (
  ${columns},
  row_id bigint NOT NULL,
  CONSTRAINT "${key.constraint}" PRIMARY KEY (${key.columns.join(', ')})
)`;
}

/** What a side table keys on, and the constraint a duplicate violates (the plain layout's name). */
function sideKey(table: TableName, kind: PartitionedKind) {
  return kind === 'outbox'
    ? { columns: ['message_id'], constraint: `${table.name}_message_id_key` }
    : { columns: ['source', 'idempotency_key'], constraint: `${table.name}_source_idempotency_key_key` };
}

/** `<side>.<column> = <row>.<column>` for each column of a side table's key. */
const sameSideKey = (columns: readonly string[], side: string, row: string) =>
  columns.map((column) => `${side}.${column} = ${row}.${column}`).join(' AND ');

/**
 * What keeps a side table in step with its table, whatever writes it:
 *
 * - a row inserted by another statement than the layout's (an operator's, another service's)
 *   is registered before it is stored (`<table>_register`, a `BEFORE INSERT` row trigger): a key
 *   the side table holds for another row raises the unique violation the plain layout's
 *   constraint would, under its name. A row of the layout's own statements finds its side row
 *   already written with its id: one probe;
 * - a `DELETE` through the table (the plain retention's batches, `sentRows: 'delete'`, a discard,
 *   an operator's own) deletes their side rows in the same statement, from its transition table
 *   (`<table>_forget`); a `TRUNCATE` of the table empties its side table (`<table>_forget_all`).
 *
 * A partition's drop fires none of them; retention follows it itself (`forgetSideRowsSql`).
 * Functions in the table's schema.
 */
export function sideTableTriggersSql(table: TableName, kind: PartitionedKind): string[] {
  const side = pgTable(sideTableOf(table, kind));
  const [register, forget, forgetAll] = SIDE_FUNCTIONS.map((suffix) => pgTable(tableBeside(table, `${table.name}_${suffix}`)));
  const key = sideKey(table, kind);
  const sameKey = (alias: string, row: string) => sameSideKey(key.columns, alias, row);
  const newKey = key.columns.map((column) => `NEW.${column}`);
  return [
    `CREATE FUNCTION ${register}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  held bigint;
BEGIN
  SELECT s.row_id INTO held FROM ${side} s WHERE ${sameKey('s', 'NEW')};
  IF held IS NULL THEN
    INSERT INTO ${side} (${key.columns.join(', ')}, row_id) VALUES (${newKey.join(', ')}, NEW.id) ON CONFLICT DO NOTHING;
    IF FOUND THEN
      RETURN NEW;
    END IF;
    SELECT s.row_id INTO held FROM ${side} s WHERE ${sameKey('s', 'NEW')};
  END IF;
  IF held = NEW.id THEN
    RETURN NEW;
  END IF;
  RAISE unique_violation USING
    MESSAGE = 'duplicate key value violates unique constraint "${key.constraint}"',
    DETAIL = format('Key (${key.columns.join(', ')})=(%s) already exists.', concat_ws(', ', ${newKey.join(', ')})),
    CONSTRAINT = '${key.constraint}',
    TABLE = '${table.name}';
END $$`,
    `CREATE FUNCTION ${forget}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM ${side} s USING gone g WHERE ${sameKey('s', 'g')} AND s.row_id = g.id;
  RETURN NULL;
END $$`,
    `CREATE FUNCTION ${forgetAll}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE ${side};
  RETURN NULL;
END $$`,
    `CREATE TRIGGER register_side_row BEFORE INSERT ON ${pgTable(table)} FOR EACH ROW EXECUTE FUNCTION ${register}()`,
    `CREATE TRIGGER forget_side_rows AFTER DELETE ON ${pgTable(table)} REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION ${forget}()`,
    `CREATE TRIGGER forget_all_side_rows AFTER TRUNCATE ON ${pgTable(table)} FOR EACH STATEMENT EXECUTE FUNCTION ${forgetAll}()`,
  ];
}

/** The trigger functions of `sideTableTriggersSql`: `<table>_<suffix>`. */
const SIDE_FUNCTIONS = ['register', 'forget', 'forget_all'] as const;

/** The functions of `sideTableTriggersSql`, dropped with their triggers. */
export const dropSideTableTriggersSql = (table: TableName) =>
  SIDE_FUNCTIONS.map((suffix) => `DROP FUNCTION IF EXISTS ${pgTable(tableBeside(table, `${table.name}_${suffix}`))}() CASCADE`);

/** A partitioned table's side table: its message ids (outbox) or dedupe keys (inbox). */
export const sideTableOf = (table: TableName, kind: PartitionedKind) =>
  kind === 'outbox' ? messageIdsTableOf(table) : inboxKeysTableOf(table);

/** The next id of a table's identity sequence (looked up once a statement). */
const nextId = (table: TableName) => `nextval((SELECT pg_get_serial_sequence(${pgLiteral(pgTable(table))}, 'id'))::regclass)`;

/**
 * The partitioned layout's outbox insert: the plain layout's `outboxInsertSql` and
 * `outboxInsertIfAbsentSql`, with the same parameters ($1..$6 the rows' arrays, $7 the notification
 * channel) and the same rows back. Each message id is written to the side table first: a duplicate
 * raises the unique violation there (strict), or, with `ifAbsent`, is skipped there and never
 * reaches the outbox (a concurrent insert of the same id is waited for, as in the plain layout; a
 * duplicate within the batch keeps its first row).
 */
export const partitionedOutboxInsertSql = (outbox: TableName, ifAbsent: boolean) => `WITH m AS (
  SELECT ${nextId(outbox)} AS id, m.message_id, m.destination, m.key, m.payload, m.headers, m.available_at
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::timestamptz[])
    AS m(message_id, destination, key, payload, headers, available_at)
), ids AS (
  INSERT INTO ${pgTable(messageIdsTableOf(outbox))} (message_id, row_id)
  SELECT m.message_id, m.id FROM m${ifAbsent ? '\n  ON CONFLICT (message_id) DO NOTHING' : ''}
  RETURNING row_id
), inserted AS (
  INSERT INTO ${pgTable(outbox)} (id, message_id, destination, "key", payload, headers, available_at) OVERRIDING SYSTEM VALUE
  SELECT m.id, m.message_id, m.destination, m.key, m.payload, m.headers, coalesce(m.available_at, now())
  FROM m JOIN ids ON ids.row_id = m.id
  RETURNING id, message_id
)
SELECT inserted.id, inserted.message_id FROM inserted, (SELECT pg_notify($7, '')) AS wake`;

/** $1 = message ids: the rows the outbox holds for them (`outboxFindSql` of the partitioned layout). */
export const partitionedOutboxFindSql = (outbox: TableName) =>
  `SELECT row_id AS id, message_id FROM ${pgTable(messageIdsTableOf(outbox))} WHERE message_id = ANY($1::uuid[])`;

/**
 * The partitioned layout's inbox insert, with `inboxInsertSql`'s parameters and rows: the key is
 * written to the side table first, and a duplicate (stored, or being stored by a concurrent
 * receive, which is waited for) stops there: no row back, no notification.
 */
export const partitionedInboxInsertSql = (inbox: TableName) => `WITH k AS (
  INSERT INTO ${pgTable(inboxKeysTableOf(inbox))} (source, idempotency_key, row_id)
  VALUES ($1, $2, ${nextId(inbox)})
  ON CONFLICT (source, idempotency_key) DO NOTHING
  RETURNING row_id
), inserted AS (
  INSERT INTO ${pgTable(inbox)} (id, source, idempotency_key, aggregate_id, payload, headers) OVERRIDING SYSTEM VALUE
  SELECT k.row_id, $1, $2, $3, $4::jsonb, $5::jsonb FROM k
  RETURNING id
)
SELECT id, pg_notify($6, $1) AS wake FROM inserted`;

/** $1 = source, $2 = idempotency key: the row that holds it (`inboxFindSql` of the partitioned layout). */
export const partitionedInboxFindSql = (inbox: TableName) =>
  `SELECT row_id AS id FROM ${pgTable(inboxKeysTableOf(inbox))} WHERE source = $1 AND idempotency_key = $2`;

/**
 * $1, $2: a range of ids [from, to) of a detached partition. Forgets the side rows of its rows
 * (their message ids or dedupe keys may be used again, as after the plain layout's deletes), one
 * range at a time, before the partition is dropped: a probe of the side table's key per row.
 */
export function forgetSideRowsSql(table: TableName, kind: PartitionedKind, name: string): string {
  const partition = pgTable(tableBeside(table, name));
  return `DELETE FROM ${pgTable(sideTableOf(table, kind))} s USING ${partition} p
  WHERE p.id >= $1::bigint AND p.id < $2::bigint AND ${sameSideKey(sideKey(table, kind).columns, 's', 'p')} AND s.row_id = p.id`;
}
