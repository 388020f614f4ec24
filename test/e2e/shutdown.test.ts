import assert from 'node:assert/strict';
import { it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxInstance } from '../../lib/instance/queuebox.instance';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

describeWithDatabase('I9: graceful shutdown', { truncate: ['queuebox_outbox'] }, (db) => {
  const stateOf = async (id: string) =>
    (await db.query<{ state: string }>('SELECT state FROM queuebox_outbox WHERE id = $1', [id]))[0].state;

  it('waits for an in-flight publish and records it before the DataSource closes', async () => {
    const held = gate();
    const publisher = new RecordingPublisher(() => held.promise);
    const t = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20, shutdownTimeoutMs: 10_000 } });
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    const { id } = await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
    await publisher.waitForCalls(1);

    let stateWhenDataSourceCloses: string | undefined;
    const destroy = dataSource.destroy.bind(dataSource);
    dataSource.destroy = async () => {
      stateWhenDataSourceCloses = await stateOf(id);
      return destroy();
    };
    let closed = false;
    const closing = t.app.close().then(() => {
      closed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(closed, false, 'close() waits while the publish runs');
    held.open();
    await closing;
    assert.equal(stateWhenDataSourceCloses, 'sent', 'the row was marked sent before TypeORM closed its DataSource');
    assert.equal(publisher.calls.length, 1, 'no new claims after shutdown began');
  });

  it('gives back claims that never started, so they need not wait for their lease', async () => {
    const held = gate();
    const publisher = new RecordingPublisher(() => held.promise);
    const t = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20, batchSize: 5, concurrency: 1 } });
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) =>
      t.get(OutboxService).enqueueMany(
        manager,
        Array.from({ length: 5 }, (_, n) => ({ destination: 'd', payload: n })),
      ),
    );
    await publisher.waitForCalls(1);
    assert.equal((await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'processing'")).length, 5, 'five claimed, one started');
    const closing = t.app.close();
    await eventually(
      async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'pending'")).length === 4,
      'the unstarted four to be given back',
    );
    held.open();
    await closing;
    const rows = await db.query<{ state: string; attempts: number }>('SELECT state, attempts FROM queuebox_outbox ORDER BY id');
    assert.deepEqual(rows[0], { state: 'sent', attempts: 1 });
    assert.ok(rows.slice(1).every((r) => r.state === 'pending' && r.attempts === 0));
  });

  /**
   * Enqueues one message, lets `publisher` start it in an app whose shutdown waits 300 ms (with a
   * lease far longer than the test: only the release on leaving can free the row in time), closes
   * the app, and returns the row and what the app logged.
   */
  async function abandonAtShutdown(publisher: RecordingPublisher) {
    const first = await createTestApp(db.url, {
      outbox: { publisher, pollIntervalMs: 20, claimTimeoutMs: 120_000, publishTimeout: 60_000, shutdownTimeoutMs: 300 },
    });
    const dataSource = first.app.get<DataSource>(getDataSourceToken());
    const { id, messageId } = await dataSource.transaction((manager) =>
      first.get(OutboxService).enqueue(manager, { destination: 'd', payload: 2 }),
    );
    await publisher.waitForCalls(1);
    const instance = first.get(QueueBoxInstance).id;
    assert.deepEqual(await db.query('SELECT claimed_by FROM queuebox_outbox WHERE id = $1', [id]), [{ claimed_by: instance }]);
    const started = Date.now();
    await first.app.close();
    const tookMs = Date.now() - started;
    assert.equal(publisher.calls[0].signal.aborted, true, 'the abandoned publish was told to stop');
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [instance]), [], 'deregistered');
    const [row] = await db.query<{ state: string; attempts: number; claim_token: string | null }>(
      'SELECT state, attempts, claim_token FROM queuebox_outbox WHERE id = $1',
      [id],
    );
    return { id, messageId, row, tookMs, logger: first.logger };
  }

  /** Starts a second app that publishes the released row; returns the attempt it published it as. */
  async function publishElsewhere(id: string): Promise<number> {
    const publisher = new RecordingPublisher();
    const second = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20 } });
    try {
      await eventually(async () => (await stateOf(id)) === 'sent', 'the released row to be published', 10_000);
      return publisher.calls[0].message.attempt;
    } finally {
      await second.app.close();
    }
  }

  it('after shutdownTimeoutMs a publish that honours its signal ends at once; its row is released, no attempt charged, and no duplicate is named', async () => {
    const honouring = new RecordingPublisher(
      (_message, signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    );
    const { id, messageId, row, tookMs, logger } = await abandonAtShutdown(honouring);
    assert.ok(tookMs >= 300 && tookMs < 3000, `close() took ${tookMs} ms with a 300 ms shutdown timeout`);
    assert.deepEqual(row, { state: 'pending', attempts: 0, claim_token: null }, 'released at once, the attempt not charged');
    const lines = JSON.stringify(logger.lines);
    assert.ok(
      logger.has(
        'warn',
        'shutdown timeout reached with 1 message(s) still in flight: their signals are aborted and their outcomes not written; their rows are released (back to pending, no attempt charged) when this instance deregisters',
      ),
      lines,
    );
    assert.ok(logger.has('warn', 'Left the instances table and released 1 outbox and 0 inbox row(s) still claimed'), lines);
    assert.ok(logger.has('warn', 'back to pending, no attempt charged'), lines);
    assert.ok(!logger.lines.some((line) => line.message.includes('ignores its signal')), `no "ignores its signal": ${lines}`);
    assert.ok(!logger.lines.some((line) => line.message.includes('delivered twice')), `no duplicate named: ${lines}`);
    assert.ok(!lines.includes(messageId), `the message is not named: ${lines}`);
    assert.ok(!lines.includes('lease expires'), `nothing says the row waits for its lease: ${lines}`);
    assert.equal(await publishElsewhere(id), 1, 'the next replica publishes it as attempt 1: the release charged nothing');
    assert.equal(honouring.delivered.length, 0, 'the aborted publish delivered nothing');
  });

  it('after shutdownTimeoutMs a publish that ignores its signal is named as a possible duplicate; its row is released all the same, no attempt charged', async () => {
    const late = gate();
    const ignoring = new RecordingPublisher(() => late.promise); // never looks at its signal
    const { id, messageId, row, tookMs, logger } = await abandonAtShutdown(ignoring);
    assert.ok(tookMs >= 300 && tookMs < 3000, `close() took ${tookMs} ms with a 300 ms shutdown timeout`);
    assert.deepEqual(row, { state: 'pending', attempts: 0, claim_token: null }, 'released at once, the attempt not charged');
    const lines = JSON.stringify(logger.lines);
    assert.ok(
      logger.has(
        'warn',
        `The publish of message ${messageId} was aborted by the shutdown (it ran past "outbox.shutdownTimeoutMs", 300 ms), but the publisher ignores its signal and is still running`,
      ),
      lines,
    );
    assert.ok(!lines.includes('publishTimeout'), `the publish timeout is not blamed: ${lines}`);
    assert.ok(
      logger.has('warn', `Left the instances table and released 1 outbox and 0 inbox row(s) still claimed`) &&
        logger.has('warn', `The publish of message(s) ${messageId} ignored its abort signal`) &&
        logger.has('warn', 'may be delivered twice'),
      lines,
    );
    assert.equal(await publishElsewhere(id), 1, 'the next replica publishes it as attempt 1: the release charged nothing');
    late.open(); // the ignoring publish ends after all: the destination has the message twice
    await eventually(async () => ignoring.delivered.length === 1, 'the ignoring publish to deliver');
    assert.deepEqual(
      await db.query<{ state: string; attempts: number }>('SELECT state, attempts FROM queuebox_outbox WHERE id = $1', [id]),
      [{ state: 'sent', attempts: 1 }],
      'the late publish wrote nothing: the row is as the second replica left it',
    );
  });
});
