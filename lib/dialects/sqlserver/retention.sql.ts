import { deadAt } from './columns';
import { COUNTED, GONE, historyOfGone } from './lease.sql';
import { msAgo } from './time';

// RetentionService's lock and deletes.

/**
 * @0 = lock name. The retention lock: exclusive, owned by a transaction that holds nothing else,
 * never waited for (`@LockTimeout = 0`). Returns sp_getapplock's result: 0 or 1 granted, -1 held
 * elsewhere. TypeORM's SQL Server driver keeps a connection only inside a transaction, so the lock
 * is a transaction's; the deletes run on other connections, each batch its own transaction.
 */
export const retentionTryLockSql = () => `DECLARE @granted INT;
EXEC @granted = sp_getapplock @Resource = @0, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;
SELECT @granted AS [granted];`;

/**
 * @0 = age in ms, @1 = batch size. Deletes up to @1 finished or dead rows older than the age,
 * through the filtered index of that state; READPAST so a batch never waits on a locked row. With
 * `history` (the attempts migration), the deleted rows' attempt history goes with them in the same batch
 * (and transaction), and the batch returns `n`, the rows deleted.
 */
export const retentionDeleteSql = (
  table: string,
  kind: 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead',
  history?: string,
) => {
  const pick = {
    'outbox-sent': { state: 'sent', age: '[sent_at]' },
    'inbox-processed': { state: 'processed', age: '[processed_at]' },
    'outbox-dead': { state: 'dead', age: deadAt('outbox') },
    'inbox-dead': { state: 'dead', age: deadAt('inbox') },
  }[kind];
  const where = `WHERE [state] = N'${pick.state}' AND ${pick.age} < ${msAgo('@0')}`;
  if (history === undefined) return `${COUNTED}DELETE TOP (@1) FROM ${table} WITH (ROWLOCK, READPAST)\n${where}`;
  return `${GONE}DELETE TOP (@1) FROM ${table} WITH (ROWLOCK, READPAST)
OUTPUT deleted.[id] INTO @gone
${where};
${historyOfGone(history)}
SELECT COUNT_BIG(*) AS [n] FROM @gone;`;
};
