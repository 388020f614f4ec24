import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';

/** Who listens to the statements of each pool: each client of the pool is wrapped once, whatever the counters. */
const listeners = new WeakMap<Pool, Set<(text: string) => void>>();
const wrapped = new WeakSet<PoolClient>();

function listenersOf(pool: Pool): Set<(text: string) => void> {
  let set = listeners.get(pool);
  if (set) return set;
  const own = new Set<(text: string) => void>();
  set = own;
  listeners.set(pool, own);
  pool.on('acquire', (client) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0] as string | { text?: string } | undefined;
      const text = typeof first === 'string' ? first : (first?.text ?? '');
      for (const listener of own) listener(text);
      return query(...args);
    };
  });
  return own;
}

/**
 * Counts the statements matching `pattern` that `dataSource`'s PostgreSQL pool sends to the database
 * from now until `stop()`: QueueBox's statements go straight to the pool (not through TypeORM's
 * logger), on connections it hands out. A connection held since before the first count (a LISTEN
 * connection) is not watched.
 */
export function countStatements(dataSource: DataSource, pattern: RegExp): { readonly count: number; stop(): void } {
  const set = listenersOf((dataSource.driver as unknown as { master: Pool }).master);
  const counter = {
    count: 0,
    stop: () => {
      set.delete(listener);
    },
  };
  const listener = (text: string) => {
    if (pattern.test(text)) counter.count++;
  };
  set.add(listener);
  return counter;
}
