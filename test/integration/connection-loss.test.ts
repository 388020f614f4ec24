import assert from 'node:assert/strict';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { Pool } from 'pg';
import { type DataSource, DataSource as DataSourceClass, type EntityManager } from 'typeorm';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { PostgresWorkListener } from '../../lib/dialects/postgres/postgres.listener';
import { TransactionLostError, TransactionRequiredError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { startWorker } from '../support/processes';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What the handler does after its business write; set per test. */
let afterWrite: (manager: EntityManager) => Promise<void> = async () => undefined;

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 5, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async handle(message: InboxMessage, { manager }: PullContext) {
    await manager.query('INSERT INTO ledger (idempotency_key) VALUES ($1)', [message.idempotencyKey]);
    await afterWrite(manager);
  }
}

const emptied = { truncate: ['queuebox_outbox', 'queuebox_inbox', 'ledger'] };
describeWithDatabase('statements given an EntityManager join its transaction or fail', emptied, (db) => {
  let t: TestApp;
  let dataSource: DataSource;

  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, idempotency_key text)');
    t = await createTestApp(db.url, { workers: false, pull: { sources: ['payments'] } }, { providers: [LedgerHandler] });
    dataSource = t.app.get<DataSource>(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    afterWrite = async () => undefined;
  });

  /**
   * Terminates the backend of `manager`'s connection from another session while the transaction
   * sits idle, and waits until the driver has seen its connection end (TypeORM then releases the
   * query runner).
   */
  async function terminateBackendOf(manager: EntityManager): Promise<void> {
    const [{ pid }] = await manager.query('SELECT pg_backend_pid() AS pid');
    const client = (manager.queryRunner as unknown as { databaseConnection: NodeJS.EventEmitter }).databaseConnection;
    const ended = new Promise((resolve) => client.once('end', resolve));
    const [{ terminated }] = await db.query<{ terminated: boolean }>('SELECT pg_terminate_backend($1) AS terminated', [pid]);
    assert.equal(terminated, true);
    await ended;
  }

  /** Runs `work` in a transaction whose connection is terminated first; returns what the transaction threw. */
  async function inDeadTransaction(work: (manager: EntityManager) => Promise<unknown>): Promise<unknown> {
    let workError: unknown;
    const outcome = await dataSource
      .transaction(async (manager) => {
        await terminateBackendOf(manager);
        try {
          await work(manager);
        } catch (error) {
          workError = error;
          throw error;
        }
      })
      .then(
        () => 'committed',
        (error: unknown) => error,
      );
    assert.notEqual(outcome, 'committed');
    return workError;
  }

  it('enqueue(manager) on a transaction whose connection died throws TransactionLostError and stores nothing', async () => {
    const error = await inDeadTransaction((manager) =>
      t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 1 } }),
    );
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    assert.equal(error.code, 'QUEUEBOX_TRANSACTION_LOST');
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), [], 'no outbox row committed on its own');
  });

  it('the dialect never runs a statement meant for a dead transaction on the pool', async () => {
    const dialect = t.app.get<Dialect>(QUEUEBOX_DIALECT);
    const row = {
      messageId: '6f1c0d4e-7d55-4a8c-9d59-0b6f4c1c2a10',
      destination: 'billing',
      key: null,
      payloadJson: '{}',
      headersJson: '{}',
      availableAt: null,
    };
    const error = await inDeadTransaction((manager) => dialect.outboxInsert({ manager, rows: [row] }));
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    const inbox = { source: 'payments', idempotencyKey: 'k1', aggregateId: null, payloadJson: '{}', headersJson: '{}' };
    const inboxError = await inDeadTransaction((manager) => dialect.inboxInsertIfAbsent({ row: inbox, manager }));
    assert.ok(inboxError instanceof TransactionLostError, `got ${String(inboxError)}`);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), []);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
  });

  it('receive(message, manager) on a transaction whose connection died throws TransactionLostError and stores nothing', async () => {
    const error = await inDeadTransaction((manager) =>
      t.get(InboxService).receive({ source: 'payments', idempotencyKey: 'p1', payload: { n: 1 } }, manager),
    );
    assert.ok(error instanceof TransactionLostError, `got ${String(error)}`);
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), [], 'no inbox row committed on its own');
  });

  it('a pull handler whose connection dies after its business write does not end processed; the retry processes it once', async () => {
    await t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'l1', payload: {} });
    afterWrite = terminateBackendOf;
    assert.equal(await t.get(PullWorker).runOnce('ledger'), 1);
    assert.deepEqual(await db.query('SELECT idempotency_key FROM ledger'), [], 'the business write died with its connection');
    const [row] = await db.query<{ state: string; last_error: string }>('SELECT state, last_error FROM queuebox_inbox');
    assert.equal(row.state, 'pending', 'not processed: the completion did not commit on a pooled connection');
    assert.match(row.last_error, /TransactionLostError/);
    afterWrite = async () => undefined;
    assert.equal(await t.get(PullWorker).runOnce('ledger'), 1);
    assert.deepEqual(await db.query('SELECT idempotency_key FROM ledger'), [{ idempotency_key: 'l1' }]);
    assert.deepEqual(await db.query('SELECT state, attempts FROM queuebox_inbox'), [{ state: 'processed', attempts: 2 }]);
  });

  it('enqueue(dataSource.manager) outside a transaction throws TransactionRequiredError and stores nothing', async () => {
    const outbox = t.get(OutboxService);
    await assert.rejects(
      outbox.enqueue(dataSource.manager, { destination: 'billing', payload: {} }),
      (error: unknown) => error instanceof TransactionRequiredError && error.code === 'QUEUEBOX_TRANSACTION_REQUIRED',
    );
    const runner = dataSource.createQueryRunner();
    try {
      await assert.rejects(outbox.enqueueMany(runner.manager, [{ destination: 'billing', payload: {} }]), TransactionRequiredError);
    } finally {
      await runner.release();
    }
    assert.deepEqual(await db.query('SELECT id FROM queuebox_outbox'), []);
  });

  it('allowAutocommit: a script may enqueue outside a transaction on purpose', async () => {
    const [result] = await t
      .get(OutboxService)
      .enqueueMany(dataSource.manager, [{ destination: 'billing', payload: { backfill: true } }], { allowAutocommit: true });
    assert.deepEqual(await db.query('SELECT id::text FROM queuebox_outbox'), [{ id: result.id }]);
  });

  it('receive(message, dataSource.manager) throws TransactionRequiredError; receive(message) alone stores it', async () => {
    const inbox = t.get(InboxService);
    await assert.rejects(
      inbox.receive({ source: 'payments', idempotencyKey: 'r1', payload: {} }, dataSource.manager),
      TransactionRequiredError,
    );
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
    assert.equal((await inbox.receive({ source: 'payments', idempotencyKey: 'r1', payload: {} })).duplicate, false);
  });
});

/** Set by the renewal test: what the holding handler does. */
let holding: () => Promise<void> = async () => undefined;

@Injectable()
class HoldingHandler {
  @PullHandler('holding', { leaseMs: 600 })
  async handle() {
    await holding();
  }
}

describeWithDatabase('pull renewals: their set-aside connection while it is there, else the pool', (db) => {
  it('the renewal connection dies under a handler that outlives its lease: renewals go on through the pool, nothing is lost', {
    timeout: 60_000,
  }, async () => {
    const t = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 10 } },
      { providers: [HoldingHandler] },
    );
    try {
      const worker = t.get(PullWorker) as unknown as { renewals: { runner: { query(sql: string): Promise<{ pid: number }[]> } } };
      const renewalConnection = worker.renewals.runner;
      const [{ pid }] = await renewalConnection.query('SELECT pg_backend_pid() AS pid');
      const handled = new Promise<void>((resolve) => {
        holding = async () => {
          await db.query('SELECT pg_terminate_backend($1)', [pid]);
          // Three leases of 600 ms: renewals every 200 ms must keep it, through the pool.
          await sleep(1800);
          resolve();
        };
      });
      await t.get(InboxService).receive({ source: 'holding', idempotencyKey: 'h1', payload: {} });
      await handled;
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state = 'processed'")).length === 1,
        'the completion',
      );
      assert.deepEqual(await db.query('SELECT attempts FROM queuebox_inbox'), [{ attempts: 1 }], 'never lost, never retried');
      assert.equal(t.get(QueueBoxMetrics).total('queuebox_claims_lost_total'), 0);
      assert.notEqual(worker.renewals.runner, renewalConnection, 'a new renewal connection replaced the dead one');
    } finally {
      holding = async () => undefined;
      await t.app.close();
    }
  });
});

describeWithDatabase('a dropped connection ends no QueueBox process', (db) => {
  let producer: TestApp;
  const APP = 'qb_conn_chaos_worker';

  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text)');
    producer = await createTestApp(db.url, { workers: false, pull: { sources: ['ledger'] } });
  });
  after(async () => {
    await producer?.app.close();
  });

  /** The worker's URL: its connections carry an application_name, so only they are terminated. */
  const workerUrl = () => {
    const url = new URL(db.url);
    url.searchParams.set('application_name', APP);
    return url.toString();
  };
  const terminateWorkerBackends = async () =>
    (
      await db.query<{ pid: number }>(
        'SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()',
        [db.name, APP],
      )
    ).length;
  const options = {
    workers: { outbox: false, relay: false },
    pull: { pollIntervalMs: 10, maxAttempts: 1000, backoff: { initialMs: 5, maxMs: 20, jitter: false } },
  };

  it('backends terminated again and again under running pull handlers: the worker survives, keeps working, and commits each message once', {
    timeout: 120_000,
  }, async () => {
    await db.query('TRUNCATE queuebox_inbox, ledger');
    const worker = await startWorker({ dbUrl: workerUrl(), name: 'chaos', options, pullLeaseMs: 3000 });
    let kills = 0;
    try {
      const MESSAGES = 120;
      for (let n = 0; n < MESSAGES; n++) {
        await producer
          .get(InboxService)
          .receive({ source: 'ledger', idempotencyKey: `c${n}`, aggregateId: `a${n % 8}`, payload: { seq: n, holdMs: 10 } });
      }
      // Chaos: every backend of the worker (handler transactions, claims, renewals, LISTEN) is
      // terminated every 5-25 ms, at every phase: connecting, idle in transaction, mid-statement.
      const until = Date.now() + 4000;
      while (Date.now() < until && worker.child.exitCode === null) {
        kills += await terminateWorkerBackends();
        await sleep(5 + Math.random() * 20);
      }
      assert.ok(kills > 10, `terminated ${kills} backends`);
      assert.equal(worker.child.exitCode, null, 'the worker survived every terminated connection');
      await producer.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'after-chaos', aggregateId: 'z', payload: { seq: 0 } });
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed' LIMIT 1")).length === 0,
        'every message to be processed once the connections stay up',
        60_000,
      );
      const written = await db.query<{ idempotency_key: string; n: number }>(
        'SELECT idempotency_key, count(*)::int AS n FROM ledger GROUP BY idempotency_key HAVING count(*) <> 1',
      );
      assert.deepEqual(written, [], 'every business write committed exactly once, with its completion');
      assert.equal((await db.query('SELECT DISTINCT idempotency_key FROM ledger')).length, MESSAGES + 1);
    } finally {
      worker.child.kill('SIGTERM');
    }
    assert.equal(await worker.exited, 'SIGTERM', 'closed by its signal, not by a crash');
  });

  it('backends terminated while the worker closes (a handler running, LISTEN being ended): it closes cleanly', {
    timeout: 60_000,
  }, async () => {
    await db.query('TRUNCATE queuebox_inbox, ledger');
    const worker = await startWorker({ dbUrl: workerUrl(), name: 'closing', options, pullLeaseMs: 3000 });
    await producer.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'held', payload: { seq: 1, holdMs: 1500 } });
    await eventually(async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state = 'processing'")).length === 1, 'the claim');
    worker.child.kill('SIGTERM');
    let exited = false;
    const exit = worker.exited.finally(() => {
      exited = true;
    });
    while (!exited) {
      await terminateWorkerBackends();
      await sleep(5);
    }
    assert.equal(await exit, 'SIGTERM', 'closed by its signal, not by a crash');
  });

  it('a client the pool hands out already has an error listener (before TypeORM attaches its own)', async () => {
    const pool = (producer.app.get<DataSource>(getDataSourceToken()).driver as unknown as { master: Pool }).master;
    const listeners = await new Promise<number>((resolve, reject) => {
      pool.connect((error, client, release) => {
        if (error || !client) return reject(error);
        // pg-pool removed its idle listener just now; TypeORM's comes a few promise ticks later.
        const count = client.listenerCount('error');
        release();
        resolve(count);
      });
    });
    assert.ok(listeners >= 1, 'an error arriving now would be an unhandled error event');
  });

  it('the LISTEN connection dropping during close() does not crash the process', async () => {
    const dataSource = new DataSourceClass({ type: 'postgres', url: db.url, logging: false });
    await dataSource.initialize();
    try {
      let listening!: () => void;
      const up = new Promise<void>((resolve) => {
        listening = resolve;
      });
      const started = new PostgresWorkListener(
        dataSource,
        { outbox: 'qb_conn_outbox', inbox: 'qb_conn_inbox' },
        () => undefined,
        (on) => {
          if (on) listening();
        },
      );
      await started.start();
      await up;
      const client = (started as unknown as { client: { connection: { stream: { destroy(): void } } } }).client;
      const closing = started.close();
      // The socket goes away while UNLISTEN * is in flight.
      client.connection.stream.destroy();
      await closing;
      // Let the driver deliver its 'error' and 'end' events: an unhandled one would fail this test.
      await new Promise((resolve) => setImmediate(resolve));
      await sleep(50);
    } finally {
      await dataSource.destroy();
    }
  });
});
