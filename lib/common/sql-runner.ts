import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { TransactionLostError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

export interface SqlResult<T> {
  rows: T[];
  affected: number;
}

/**
 * Runs one statement and returns rows and the affected count the same way for every driver.
 *
 * With a `manager` that has a query runner (a transaction, or a connection set aside), the
 * statement runs on that connection or not at all: when it was released or broke, this throws
 * `TransactionLostError`. It never falls back to the pool, where the write would commit on its
 * own after the caller's transaction was gone (an outbox row from a rolled-back change breaks I2).
 * Without a query runner (`dataSource.manager`, or no manager) the statement runs on a pooled
 * connection of its own.
 */
export async function runSql<T = Record<string, unknown>>(
  dataSource: DataSource,
  sql: string,
  params: unknown[],
  manager?: EntityManager,
): Promise<SqlResult<T>> {
  const joined = manager?.queryRunner;
  if (joined) return runJoined<T>(joined, sql, params);
  const runner = dataSource.createQueryRunner();
  try {
    return toSqlResult<T>(await runner.query(sql, params, true));
  } finally {
    await runner.release();
  }
}

/** Runs on the caller's connection, or throws `TransactionLostError` when that connection is gone. */
function runJoined<T>(runner: QueryRunner, sql: string, params: unknown[]): Promise<SqlResult<T>> {
  return onConnectionOf(runner, async () => toSqlResult<T>(await runner.query(sql, params, true)));
}

/**
 * Runs `send` (a statement on `runner`'s connection), or throws `TransactionLostError` when that
 * connection is gone, before or under the statement. For a dialect that sends a statement on the
 * runner's connection itself, as `runSql` does with a manager.
 */
export async function onConnectionOf<T>(runner: QueryRunner, send: () => Promise<T>): Promise<T> {
  if (runner.isReleased) throw new TransactionLostError(messages.transactionLost());
  try {
    return await send();
  } catch (error) {
    // The connection broke under the statement: TypeORM released the runner on the driver's error.
    if (runner.isReleased) throw new TransactionLostError(messages.transactionLost(), { cause: error });
    throw error;
  }
}

function toSqlResult<T>(result: { records?: unknown[]; affected?: number }): SqlResult<T> {
  return { rows: (result.records ?? []) as T[], affected: result.affected ?? 0 };
}
