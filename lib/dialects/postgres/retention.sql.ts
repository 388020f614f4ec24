import { ADMIN_COLUMNS, deadAt } from './columns';
import { msAgo } from './time';

// RetentionService's lock and deletes.

/**
 * $1 = lock name. Retention runs on one replica at a time: a session advisory lock, tried, never
 * waited for; the key is `hashtextextended(name, 0)` like the claim locks.
 */
export const retentionTryLockSql = () => 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked';

export const retentionUnlockSql = () => 'SELECT pg_advisory_unlock(hashtextextended($1, 0)) AS unlocked';

/**
 * $1 = age in ms, $2 = batch size. Deletes finished or dead rows older than the age, oldest first,
 * through the partial index on that state (`sent_idx`, `processed_idx`, `dead_idx`). Materialized
 * once so the limit holds; SKIP LOCKED so a batch never waits. With `history` (the attempts migration), the
 * deleted rows' attempt history goes with them in the same statement (through its primary key,
 * `row_id` first) and the statement returns `n`, the rows deleted.
 */
export const retentionDeleteSql = (
  table: string,
  kind: 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead',
  history?: string,
) => {
  const pick = {
    'outbox-sent': { state: 'sent', age: 'sent_at', order: 'sent_at' },
    'inbox-processed': { state: 'processed', age: 'processed_at', order: 'processed_at' },
    'outbox-dead': { state: 'dead', age: deadAt(ADMIN_COLUMNS.outbox), order: 'id' },
    'inbox-dead': { state: 'dead', age: deadAt(ADMIN_COLUMNS.inbox), order: 'id' },
  }[kind];
  const batch = `WITH batch AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE state = '${pick.state}' AND ${pick.age} < ${msAgo('$1')}
  ORDER BY ${pick.order}
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)`;
  const remove = `DELETE FROM ${table} t
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = '${pick.state}'`;
  if (history === undefined)
    return `${batch}
${remove}`;
  return `${batch}, gone AS (
${remove}
RETURNING t.id
), history AS (
  DELETE FROM ${history} h WHERE h.row_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT count(*)::integer AS n FROM gone`;
};
