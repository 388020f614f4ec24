import { QueueBoxValidationError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import type { MessageSearch, MessageState } from '../message-rows';
import { ADMIN_COLUMNS, type Component, deadAt } from './columns';
import { bigintOrNull, instant, int, KEY_LENGTH, name, text } from './sqlserver.params';
import { asUtc, utcInstant } from './time';

// The message browser (QueueBoxAdmin.findMessages) and the long history (QueueBoxAdmin.history).
// Every value is a typed parameter (@0, @1, ...); only the statement's shape follows which criteria
// are given, and a state is written as one of the fixed literals below (never the caller's text).

const STATE_LITERAL: Record<MessageState, string> = {
  pending: "N'pending'",
  processing: "N'processing'",
  sent: "N'sent'",
  processed: "N'processed'",
  dead: "N'dead'",
};

/** States a filtered index covers (`claim_idx`, `lease_idx`, `dead_idx`). */
const INDEXED_STATES: readonly MessageState[] = ['pending', 'processing', 'dead'];

export interface MessageStatement {
  sql: string;
  params: unknown[];
  plan: 'message-id' | 'state-index' | 'bounded-scan';
}

/**
 * A JSON path for JSON_VALUE, from validated segments (letters, digits, `_`, `-`): each a quoted
 * key, `$."order"."id"`, or an array index for a segment of digits, `$."items"[0]`. Sent as a
 * parameter (a variable path needs SQL Server 2017 or later).
 */
export const jsonPathOf = (segments: string[]) => `$${segments.map((s) => (/^\d+$/.test(s) ? `[${s}]` : `."${s}"`)).join('')}`;

/**
 * One page of rows, newest first, below the cursor; the same three shapes as PostgreSQL's
 * (postgres/messages.sql.ts): `message-id` (primary key, the `message_id` unique index or the
 * inbox's `(source, idempotency_key)` one), `state-index` (a filtered index's state), and
 * `bounded-scan` (TOP (@scan) of the clustered primary key, descending, filtered as it comes).
 * Paths through `JSON_VALUE(payload, @n)`. Ends with OPTION (RECOMPILE): the plan fits the values.
 */
export const messageSearchSql = (table: string, component: Component, s: MessageSearch): MessageStatement => {
  const c = ADMIN_COLUMNS[component];
  const finished = component === 'outbox' ? '[sent_at]' : '[processed_at]';
  const params: unknown[] = [];
  const p = (value: unknown) => {
    params.push(value);
    return `@${params.length - 1}`;
  };
  const where: string[] = [];
  let plan: MessageStatement['plan'] = 'bounded-scan';
  if (s.rowId !== null) {
    where.push(`[id] = ${p(bigintOrNull(s.rowId))}`);
    plan = 'message-id';
  }
  if (s.messageId !== null) {
    if (component === 'outbox') {
      where.push(`[message_id] = TRY_CAST(${p(keyParam('messageId', s.messageId))} AS UNIQUEIDENTIFIER)`);
      plan = 'message-id';
    } else {
      where.push(`[idempotency_key] = ${p(keyParam('messageId', s.messageId))}`);
      if (s.name !== null) plan = 'message-id';
    }
  }
  if (s.name !== null) where.push(`${c.name} = ${p(keyParam('name', s.name))}`);
  if (s.key !== null) where.push(`${c.key} = ${p(keyParam('key', s.key))}`);
  if (s.state !== null) {
    where.push(`[state] = ${STATE_LITERAL[s.state]}`);
    if (plan === 'bounded-scan' && INDEXED_STATES.includes(s.state)) plan = 'state-index';
  }
  const timeColumn = s.timeField === 'created' ? c.created : finished;
  if (s.since !== null) where.push(`${timeColumn} >= ${utcInstant(p(instant(s.since)))}`);
  if (s.until !== null) where.push(`${timeColumn} < ${utcInstant(p(instant(s.until)))}`);
  if (s.path !== null) {
    const column = s.path.in === 'payload' ? '[payload]' : '[headers]';
    where.push(`JSON_VALUE(${column}, ${p(text(jsonPathOf(s.path.segments), 4000))}) = ${p(text(s.path.equals, 4000))}`);
  }
  const identity = component === 'outbox' ? '[message_id], NULL AS [idempotency_key]' : 'NULL AS [message_id], [idempotency_key]';
  const columns = `[id], ${identity}, ${c.name} AS [name], ${c.key} AS [key], [state], [attempts], [last_error],
       ${asUtc(c.created)} AS [created_at], ${asUtc('[available_at]')} AS [available_at], ${asUtc('[claimed_at]')} AS [claimed_at],
       ${asUtc(finished)} AS [finished_at], [headers]${s.includePayload ? ', [payload]' : ''}`;
  const before = s.beforeId === null ? null : `[id] < ${p(bigintOrNull(s.beforeId))}`;
  const filters = (extra: (string | null)[]) => {
    const all = [...where, ...extra].filter((w): w is string => w !== null);
    return all.length === 0 ? '1 = 1' : all.join('\n  AND ');
  };
  if (plan !== 'bounded-scan') {
    return {
      plan,
      params,
      sql: `SELECT TOP (${p(int(s.limit))}) ${columns}
FROM ${table}
WHERE ${filters([before])}
ORDER BY [id] DESC
OPTION (RECOMPILE)`,
    };
  }
  const scan = p(int(s.scanLimit));
  return {
    plan,
    params,
    sql: `SELECT TOP (${p(int(s.limit))}) ${columns}
FROM (SELECT TOP (${scan}) * FROM ${table} WHERE ${before ?? '1 = 1'} ORDER BY [id] DESC) AS w
WHERE ${filters([])}
ORDER BY [id] DESC
OPTION (RECOMPILE)`,
  };
};

/** Where a bounded scan stopped: the lowest id among the (at most @1) rows below the cursor @0, and how many. */
export const messageScanEndSql = (table: string, beforeId: string | null, scanLimit: number): MessageStatement => ({
  plan: 'bounded-scan',
  params: [bigintOrNull(beforeId), int(scanLimit)],
  sql: `SELECT MIN([id]) AS [low], COUNT_BIG(*) AS [n]
FROM (SELECT TOP (@1) [id] FROM ${table} WHERE (@0 IS NULL OR [id] < @0) ORDER BY [id] DESC) AS w`,
});

/**
 * @0 = since, @2 = until (ISO-8601 UTC text, bucket boundaries), @1 = bucket length in seconds.
 * Finished and dead rows per destination / source (or, `byName` false, per component only) and
 * bucket over [@0, @2), as adminThroughputSql per minute, through the `sent_idx` /
 * `processed_idx` / `dead_idx` filtered indexes.
 */
export const adminHistorySql = (outbox: string, inbox: string, byName = true) => {
  const bucket = (column: string) => `DATEDIFF_BIG(SECOND, ${utcInstant('@0')}, ${column}) / @1`;
  const within = (column: string) => `${column} >= ${utcInstant('@0')} AND ${column} < ${utcInstant('@2')}`;
  const branches = (component: Component, table: string, finished: '[sent_at]' | '[processed_at]', state: 'sent' | 'processed') => {
    const c = ADMIN_COLUMNS[component];
    const name = byName ? c.name : "N''";
    const group = (column: string) => (byName ? `GROUP BY ${c.name}, ${bucket(column)}` : `GROUP BY ${bucket(column)}`);
    return `SELECT N'${component}' AS [component], ${name} AS [name], N'finished' AS [outcome], ${bucket(finished)} AS [minute], COUNT_BIG(*) AS [n]
FROM ${table} WHERE [state] = N'${state}' AND ${within(finished)} ${group(finished)}
UNION ALL
SELECT N'${component}', ${name}, N'dead', ${bucket(deadAt(component))}, COUNT_BIG(*)
FROM ${table} WHERE [state] = N'dead' AND ${within(deadAt(component))} ${group(deadAt(component))}`;
  };
  return `${branches('outbox', outbox, '[sent_at]', 'sent')}
UNION ALL
${branches('inbox', inbox, '[processed_at]', 'processed')}`;
};

/** A value compared with a key column, as NVARCHAR(255) like the column: a longer one is refused (it could only be cut to a prefix). */
function keyParam(field: string, value: string) {
  if (value.length > KEY_LENGTH) {
    throw new QueueBoxValidationError(field, messages.sqlServerKeyTooLong(field, value.length, KEY_LENGTH), {
      code: 'QUEUEBOX_ADMIN_ARGUMENT',
    });
  }
  return name(value);
}
