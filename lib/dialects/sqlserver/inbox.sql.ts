// SQL Server statements as pure functions of the (already bracket-quoted) table name. Parameters are positional (`@0`...).

/**
 * @0 = source, @1 = idempotency key, @2 = aggregate id, @3 = payload (JSON), @4 = headers (JSON).
 * No row back: a duplicate. UPDLOCK, HOLDLOCK lock the key's range in the unique index even when
 * no row exists yet, so a concurrent receive of the same key waits for this one's transaction
 * and then sees its row, instead of failing on the unique constraint.
 */
export const inboxInsertSql = (table: string) => `INSERT INTO ${table} ([source], [idempotency_key], [aggregate_id], [payload], [headers])
OUTPUT inserted.[id]
SELECT @0, @1, @2, @3, @4
WHERE NOT EXISTS (
  SELECT 1 FROM ${table} WITH (UPDLOCK, HOLDLOCK) WHERE [source] = @0 AND [idempotency_key] = @1)`;

/** @0 = source, @1 = idempotency key. */
export const inboxFindSql = (table: string) => `SELECT [id] FROM ${table} WHERE [source] = @0 AND [idempotency_key] = @1`;
