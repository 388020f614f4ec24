import { Client } from 'pg';
import { DataSource } from 'typeorm';
import type { TestDatabase } from './database';

/**
 * A DataSource of one connection to `db` whose every statement's plan is collected: auto_explain,
 * loaded into each new session of the database with `settings` (stored by ALTER DATABASE) and
 * `auto_explain.log_level = notice`, sends each plan to the client, and `plans` keeps the notices.
 * One connection, so the test's statements and QueueBox's run on the session whose plans are read.
 * It needs no server setting, only the auto_explain module (the embedded builds have it).
 */
export async function explainedSession(db: TestDatabase, settings: string[]): Promise<{ dataSource: DataSource; plans: string[] }> {
  const admin = new Client({ connectionString: db.url });
  await admin.connect();
  try {
    // Loaded in this session first: ALTER DATABASE checks the auto_explain settings it stores.
    await admin.query(`LOAD 'auto_explain'`);
    for (const setting of [
      `session_preload_libraries = 'auto_explain'`,
      'auto_explain.log_min_duration = 0',
      `auto_explain.log_level = 'notice'`,
      ...settings,
    ]) {
      await admin.query(`ALTER DATABASE ${db.name} SET ${setting}`);
    }
  } finally {
    await admin.end();
  }
  const plans: string[] = [];
  const dataSource = new DataSource({ type: 'postgres', url: db.url, logging: false, extra: { max: 1 } });
  await dataSource.initialize();
  const listening = new WeakSet<object>();
  (dataSource.driver as unknown as { master: PoolEvents }).master.on('acquire', (client) => {
    if (listening.has(client)) return;
    listening.add(client);
    client.on('notice', (notice) => plans.push(notice.message ?? ''));
  });
  return { dataSource, plans };
}

interface PoolEvents {
  on(event: 'acquire', listener: (client: { on(event: 'notice', listener: (notice: { message?: string }) => void): void }) => void): void;
}
