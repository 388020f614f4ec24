import type { DataSource, EntityManager } from 'typeorm';

export interface SqlResult<T> {
  rows: T[];
  affected: number;
}

/**
 * Runs one statement and returns rows and the affected count the same way for every driver.
 * With a `manager` that belongs to a transaction, the statement joins it.
 */
export async function runSql<T = Record<string, unknown>>(
  dataSource: DataSource,
  sql: string,
  params: unknown[],
  manager?: EntityManager,
): Promise<SqlResult<T>> {
  const joined = manager?.queryRunner;
  const runner = joined && !joined.isReleased ? joined : dataSource.createQueryRunner();
  try {
    const result = await runner.query(sql, params, true);
    return { rows: (result.records ?? []) as T[], affected: result.affected ?? 0 };
  } finally {
    if (runner !== joined) await runner.release();
  }
}
