import type { MessageSearch, MessageState } from '../message-rows';
import { ADMIN_COLUMNS } from './columns';

// The message browser (QueueBoxAdmin.findMessages) and the long history (QueueBoxAdmin.history).
// Every value is a positional parameter; only the statement's shape follows which criteria are
// given, and a state is written as one of the fixed literals below (never the caller's text).

const STATE_LITERAL: Record<MessageState, string> = {
  pending: "'pending'",
  processing: "'processing'",
  sent: "'sent'",
  processed: "'processed'",
  dead: "'dead'",
};

/** States a partial index covers (`claim_idx`, `lease_idx`, `dead_idx`): few rows, never the finished ones. */
const INDEXED_STATES: readonly MessageState[] = ['pending', 'processing', 'dead'];

/** A statement and its parameters, and how it is served. */
export interface MessageStatement {
  sql: string;
  params: unknown[];
  plan: 'message-id' | 'state-index' | 'bounded-scan';
}

/**
 * One page of rows, newest first (id descending), below the cursor. Three shapes:
 *
 * - `message-id`: a row id (primary key), an outbox `message_id` (unique index) or an inbox
 *   idempotency key with its source (the `(source, idempotency_key)` unique index): one row;
 * - `state-index`: a state of a partial index (pending, processing, dead): the matching ids are read
 *   through it first (materialized, as deadLetterListSql does), so the cost follows the rows in
 *   that state, and the page is cut from them;
 * - `bounded-scan`: anything else (finished rows, no state, a key or a payload path on any state):
 *   the primary key walked backwards from the cursor, at most `scanLimit` rows, filtered as they
 *   come; the outer LIMIT stops the walk as soon as the page is full.
 *
 * Paths: `payload #>> $n::text[]` (a text array parameter, segments as keys or array indexes) and
 * `headers ->> $n` for a header.
 */
export const messageSearchSql = (table: string, component: 'outbox' | 'inbox', s: MessageSearch): MessageStatement => {
  const c = ADMIN_COLUMNS[component];
  const finished = component === 'outbox' ? 'sent_at' : 'processed_at';
  const params: unknown[] = [];
  const p = (value: unknown, cast = '') => {
    params.push(value);
    return `$${params.length}${cast}`;
  };
  const where: string[] = [];
  let plan: MessageStatement['plan'] = 'bounded-scan';
  if (s.rowId !== null) {
    where.push(`id = ${p(s.rowId, '::bigint')}`);
    plan = 'message-id';
  }
  if (s.messageId !== null) {
    if (component === 'outbox') {
      where.push(`message_id = ${p(s.messageId, '::uuid')}`);
      plan = 'message-id';
    } else {
      where.push(`idempotency_key = ${p(s.messageId, '::text')}`);
      if (s.name !== null) plan = 'message-id';
    }
  }
  if (s.name !== null) where.push(`${c.name} = ${p(s.name, '::text')}`);
  if (s.key !== null) where.push(`${c.key} = ${p(s.key, '::text')}`);
  if (s.state !== null) {
    where.push(`state = ${STATE_LITERAL[s.state]}`);
    if (plan === 'bounded-scan' && INDEXED_STATES.includes(s.state)) plan = 'state-index';
  }
  const timeColumn = s.timeField === 'created' ? c.created : finished;
  if (s.since !== null) where.push(`${timeColumn} >= ${p(s.since, '::timestamptz')}`);
  if (s.until !== null) where.push(`${timeColumn} < ${p(s.until, '::timestamptz')}`);
  if (s.path !== null) {
    where.push(
      s.path.in === 'payload'
        ? `payload #>> ${p(s.path.segments, '::text[]')} = ${p(s.path.equals, '::text')}`
        : `headers ->> ${p(s.path.segments[0], '::text')} = ${p(s.path.equals, '::text')}`,
    );
  }
  const identity = component === 'outbox' ? 'message_id, NULL AS idempotency_key' : 'NULL AS message_id, idempotency_key';
  const columns = `id, ${identity}, ${c.name} AS name, ${c.key} AS "key", state, attempts, last_error, ${c.created} AS created_at,
       available_at, claimed_at, ${finished} AS finished_at, headers${s.includePayload ? ', payload' : ''}`;
  const before = s.beforeId === null ? null : `id < ${p(s.beforeId, '::bigint')}`;
  const filters = (extra: (string | null)[]) => {
    const all = [...where, ...extra].filter((w): w is string => w !== null);
    return all.length === 0 ? 'TRUE' : all.join('\n  AND ');
  };
  if (plan === 'message-id') {
    return {
      plan,
      params,
      sql: `SELECT ${columns}\nFROM ${table}\nWHERE ${filters([before])}\nORDER BY id DESC\nLIMIT ${p(s.limit, '::integer')}`,
    };
  }
  if (plan === 'state-index') {
    return {
      plan,
      params,
      sql: `WITH matching AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${filters([before])}
)
SELECT ${columns}
FROM ${table}
WHERE id = ANY (ARRAY(SELECT id FROM matching ORDER BY id DESC LIMIT ${p(s.limit, '::integer')}))
ORDER BY id DESC`,
    };
  }
  return {
    plan,
    params,
    sql: `SELECT ${columns}
FROM (SELECT * FROM ${table} WHERE ${before ?? 'TRUE'} ORDER BY id DESC LIMIT ${p(s.scanLimit, '::integer')}) w
WHERE ${filters([])}
ORDER BY id DESC
LIMIT ${p(s.limit, '::integer')}`,
  };
};

/**
 * Where a bounded scan stopped: the lowest id among the (at most `scanLimit`) rows below the
 * cursor, and how many there were (fewer than `scanLimit`: the table's first row was reached).
 * An index-only walk of the primary key. $1 = cursor (or null), $2 = scan limit.
 */
export const messageScanEndSql = (table: string, beforeId: string | null, scanLimit: number): MessageStatement => ({
  plan: 'bounded-scan',
  params: [beforeId, scanLimit],
  sql: `SELECT min(id) AS low, count(*) AS n
FROM (SELECT id FROM ${table} WHERE ($1::bigint IS NULL OR id < $1::bigint) ORDER BY id DESC LIMIT $2::integer) w`,
});

/**
 * $1 = since, $3 = until (bucket boundaries), $2 = bucket length in seconds. Finished and dead
 * rows per destination / source (or, `byName` false, per component only) and bucket from $1 up to
 * $3, as adminThroughputSql per minute: `sent_idx` and `processed_idx` are range-scanned over
 * [$1, $3) (the cost follows the rows finished in that range: QueueBoxAdmin counts only the
 * buckets it has not counted before, see admin/history-counts.ts); per component only, that is an
 * index-only scan (no row is read for its destination). Dead rows are read through `dead_idx`.
 */
export const adminHistorySql = (outbox: string, inbox: string, byName = true) => {
  const bucket = (column: string) => `floor(extract(epoch FROM ${column} - $1::timestamptz) / $2::integer)::integer`;
  const within = (column: string) => `${column} >= $1::timestamptz AND ${column} < $3::timestamptz`;
  const groups = byName ? 'GROUP BY 2, 4' : 'GROUP BY 4';
  const branches = (component: 'outbox' | 'inbox', table: string, finished: 'sent_at' | 'processed_at', state: 'sent' | 'processed') => {
    const c = ADMIN_COLUMNS[component];
    const name = byName ? c.name : "''::text";
    const deadAt = `coalesce(claimed_at, ${c.created})`;
    return `SELECT '${component}' AS component, ${name} AS name, 'finished' AS outcome, ${bucket(finished)} AS minute, count(*) AS n
FROM ${table} WHERE state = '${state}' AND ${within(finished)} ${groups}
UNION ALL
SELECT '${component}', ${name}, 'dead', ${bucket(deadAt)}, count(*)
FROM ${table} WHERE state = 'dead' AND ${within(deadAt)} ${groups}`;
  };
  return `${branches('outbox', outbox, 'sent_at', 'sent')}
UNION ALL
${branches('inbox', inbox, 'processed_at', 'processed')}`;
};
