// A custom pull client: a plain script (no Nest) that consumes inbox source "payments" through
// PullClient (claims) and LeaseService (fenced writes). Run it with `npm run example:pull-client` (embedded PostgreSQL unless DATABASE_URL
// is set). In a real system another app's InboxService.receive() fills the inbox; here the
// script inserts three messages itself.
import 'reflect-metadata';
import { createPullClient, QueueBoxMigrations } from 'queuebox';
import { DataSource } from 'typeorm';
import { openDatabase } from './database';

async function main(): Promise<void> {
  const database = await openDatabase();
  const dataSource = new DataSource({ type: 'postgres', url: database.url, migrations: [...QueueBoxMigrations], logging: false });
  try {
    await dataSource.initialize();
    await dataSource.runMigrations();
    await dataSource.query('CREATE TABLE IF NOT EXISTS payments (id text PRIMARY KEY, amount_cents integer NOT NULL)');
    await dataSource.query(
      `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload)
       SELECT 'payments', 'pay-' || n, 'order-' || (n % 2), jsonb_build_object('paymentId', 'pay-' || n, 'amountCents', n * 1000)
       FROM generate_series(1, 3) n ON CONFLICT DO NOTHING`,
    );

    const { pull, lease } = await createPullClient(dataSource);
    for (;;) {
      const claim = await pull.claim('payments', { leaseMs: 30_000 });
      if (!claim) break;
      // Renews every 10 s while we work; stopped before the completing write.
      const keeper = lease.keep(claim);
      const { paymentId, amountCents } = claim.message.payload as { paymentId: string; amountCents: number };
      try {
        await dataSource.transaction(async (manager) => {
          await manager.query('INSERT INTO payments (id, amount_cents) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [
            paymentId,
            amountCents,
          ]);
          await keeper.stop();
          // Zero rows: another client owns the message now. Throwing rolls the payment back too.
          if (!(await lease.complete(claim, manager))) throw new Error(`lost the claim on ${paymentId}`);
        });
        console.log(`recorded ${paymentId} (${amountCents / 100} EUR), attempt ${claim.attempt}`);
      } catch (error) {
        await keeper.stop();
        console.error(`could not record ${paymentId}: ${(error as Error).message}; retrying in 5 s`);
        await lease.retry(claim, { delayMs: 5000, error });
      }
    }
    const [{ count }] = await dataSource.query('SELECT count(*)::int AS count FROM payments');
    console.log(`done: ${count} payment(s) recorded, nothing left to claim`);
  } finally {
    if (dataSource.isInitialized) await dataSource.destroy();
    await database.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
