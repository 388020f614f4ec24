// SQL Server statements as pure functions of the (already bracket-quoted) table name. Parameters are positional (`@0`...).

/** The unique violations SQL Server raises: 2627 (a unique or primary key constraint), 2601 (a unique index). */
export const UNIQUE_VIOLATIONS = [2601, 2627] as const;

/**
 * @0 = source, @1 = idempotency key, @2 = aggregate id, @3 = payload (JSON), @4 = headers (JSON).
 * No row back: a duplicate. The unique constraint on (source, idempotency key) decides, as
 * PostgreSQL's ON CONFLICT DO NOTHING does: the insert waits only for an uncommitted row of the
 * same key (then fails, or goes in if that one rolled back), and a key already stored fails it
 * with 2627, which the batch catches and answers with no row. It used to look first under
 * UPDLOCK, HOLDLOCK, whose range lock on the next key made every receive of a newer key of the
 * source (ULIDs, UUIDv7, sequence numbers) wait for a caller's open transaction (issue 38 M3).
 *
 * In a caller's transaction the failed INSERT ends that statement only, and the transaction goes
 * on: the batch sets XACT_ABORT OFF for itself, whatever the connection's (mssql's
 * `abortTransactionOnError`), and SQL Server restores the connection's setting when the batch
 * returns (SET inside sp_executesql). With XACT_ABORT ON a unique violation would doom the
 * caller's transaction. No savepoint is needed: statement-level rollback undoes the failed insert
 * alone. The new id goes through a table variable, so nothing is sent before the insert succeeds.
 */
export const inboxInsertSql = (table: string) => `SET XACT_ABORT OFF;
SET NOCOUNT ON;
DECLARE @inserted TABLE ([id] BIGINT NOT NULL);
BEGIN TRY
  INSERT INTO ${table} WITH (ROWLOCK) ([source], [idempotency_key], [aggregate_id], [payload], [headers])
  OUTPUT inserted.[id] INTO @inserted ([id])
  VALUES (@0, @1, @2, @3, @4);
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() NOT IN (${UNIQUE_VIOLATIONS.join(', ')}) OR XACT_STATE() = -1
    THROW;
END CATCH;
SELECT [id] FROM @inserted;`;

/** @0 = source, @1 = idempotency key. */
export const inboxFindSql = (table: string) => `SELECT [id] FROM ${table} WHERE [source] = @0 AND [idempotency_key] = @1`;
