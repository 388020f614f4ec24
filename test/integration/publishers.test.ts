import 'reflect-metadata';
import assert from 'node:assert/strict';
import { afterEach, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Global, Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import type { OutboundMessage } from '../../lib/types/messages';
import type { OutboxOptions } from '../../lib/types/options';
import type { OutboxMessageInput, Publisher } from '../../lib/types/outbox';
import { RecordingLogger } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

/** A dependency that only Nest can give a publisher class. */
@Injectable()
class LedgerSink {
  readonly received: OutboundMessage[] = [];
}

@Injectable()
class LedgerPublisher implements Publisher {
  constructor(
    readonly sink: LedgerSink,
    @Inject('LEDGER_PREFIX') readonly prefix: string,
  ) {}
  async publish(message: OutboundMessage): Promise<void> {
    this.sink.received.push({ ...message, destination: `${this.prefix}${message.destination}` });
  }
}

@Module({ providers: [LedgerSink, { provide: 'LEDGER_PREFIX', useValue: 'ledger:' }], exports: [LedgerSink, 'LEDGER_PREFIX'] })
class LedgerModule {}

@Global()
@Module({ providers: [LedgerSink, { provide: 'LEDGER_PREFIX', useValue: 'global:' }], exports: [LedgerSink, 'LEDGER_PREFIX'] })
class GlobalLedgerModule {}

interface Row {
  message_id: string;
  destination: string;
  state: string;
  attempts: number;
  last_error: string | null;
  delay_ms: number;
}

describeWithDatabase('named publishers, routing, publishTimeout and the retry policy', (db) => {
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>> | undefined;

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await db.query('TRUNCATE queuebox_outbox');
  });

  /** An app with QueueBox through forRoot (global ledger module) or forRootAsync (ledger module imported). */
  async function start(outbox: OutboxOptions, form: 'forRoot' | 'forRootAsync' = 'forRoot') {
    const queuebox =
      form === 'forRoot'
        ? QueueBoxModule.forRoot({ workers: { outbox: true, relay: false, pull: false }, outbox })
        : QueueBoxModule.forRootAsync({
            imports: [LedgerModule],
            useFactory: async () => ({ workers: { outbox: true, relay: false, pull: false }, outbox }),
          });
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        ...(form === 'forRoot' ? [GlobalLedgerModule] : []),
        queuebox,
      ],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: new RecordingLogger(), abortOnError: false });
    const poller = app.get(OutboxPoller);
    // The worker must be on for publisher classes to be instantiated; these tests drive it by hand.
    await poller.stop();
    const dataSource = app.get<DataSource>(getDataSourceToken());
    const service = app.get(OutboxService);
    return {
      poller,
      enqueue: (messages: OutboxMessageInput[]) => dataSource.transaction((manager) => service.enqueueMany(manager, messages)),
      drain: async () => {
        while ((await poller.runOnce()) > 0);
      },
    };
  }

  const rows = () =>
    db.query<Row>(
      `SELECT message_id, destination, state, attempts, last_error,
              (extract(epoch FROM available_at - clock_timestamp()) * 1000)::int AS delay_ms
         FROM queuebox_outbox ORDER BY id`,
    );

  it('routes by destination by default; a class publisher is instantiated by Nest with its dependency (forRoot)', async () => {
    const billing = new RecordingPublisher();
    const audit = new RecordingPublisher();
    const { enqueue, drain } = await start({ publishers: { billing, audit, ledger: LedgerPublisher }, retry: false });
    await enqueue([
      { destination: 'billing', payload: 1 },
      { destination: 'audit', payload: 2 },
      { destination: 'ledger', payload: 3 },
    ]);
    await drain();
    assert.deepEqual(
      billing.delivered.map((m) => m.payload),
      [1],
    );
    assert.deepEqual(
      audit.delivered.map((m) => m.payload),
      [2],
    );
    const sink = app!.get(LedgerSink);
    assert.deepEqual(
      sink.received.map((m) => [m.destination, m.payload]),
      [['global:ledger', 3]],
    );
    assert.deepEqual(
      (await rows()).map((r) => r.state),
      ['sent', 'sent', 'sent'],
    );
  });

  it('routes with outbox.route; classes work with forRootAsync and modules given in imports', async () => {
    const http = new RecordingPublisher();
    const { enqueue, drain } = await start(
      {
        publishers: { http, ledger: LedgerPublisher },
        route: (message) => (message.destination.startsWith('ledger.') ? 'ledger' : 'http'),
        retry: false,
      },
      'forRootAsync',
    );
    await enqueue([
      { destination: 'ledger.invoices', payload: 'a' },
      { destination: 'orders', payload: 'b' },
      { destination: 'ledger.refunds', payload: 'c' },
    ]);
    await drain();
    assert.deepEqual(
      http.delivered.map((m) => m.payload),
      ['b'],
    );
    assert.deepEqual(
      app!.get(LedgerSink).received.map((m) => [m.destination, m.payload]),
      [
        ['ledger:ledger.invoices', 'a'],
        ['ledger:ledger.refunds', 'c'],
      ],
    );
  });

  it('a publisher class whose dependency is not visible fails start-up with a QueueBoxConfigError naming it as written', async () => {
    @Injectable()
    class NeedsMissing implements Publisher {
      constructor(@Inject('NOT_REGISTERED') readonly dep: unknown) {}
      async publish() {}
    }
    const startUp = async (outbox: OutboxOptions) => {
      @Module({
        imports: [TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }), QueueBoxModule.forRoot({ outbox })],
      })
      class BrokenModule {}
      return NestFactory.createApplicationContext(BrokenModule, { logger: false, abortOnError: false }).then(
        async (created) => {
          await created.close(); // started after all: close it, or its poller keeps this process alive
          return undefined;
        },
        (error: unknown) => error,
      );
    };
    for (const [outbox, option] of [
      [{ publishers: { x: NeedsMissing } }, 'outbox.publishers.x'],
      [{ publisher: NeedsMissing }, 'outbox.publisher'],
    ] as const) {
      const failure = await startUp(outbox);
      assert.ok(failure instanceof QueueBoxConfigError, `start-up failed with a QueueBoxConfigError, got ${String(failure)}`);
      assert.equal(failure.option, option);
      assert.ok(failure.message.includes(`could not instantiate publisher class NeedsMissing ("${option}")`), failure.message);
    }
  });

  it('an unknown route, or a route that throws, dead-letters the message at once with the reason', async () => {
    const billing = new RecordingPublisher();
    const { enqueue, drain } = await start({
      publishers: { billing, audit: billing },
      route: (message) => {
        if (message.destination === 'explode') throw new Error('no tenant header');
        return message.destination;
      },
      retry: 5,
    });
    await enqueue([
      { destination: 'nowhere', payload: 1 },
      { destination: 'explode', payload: 2 },
      { destination: 'constructor', payload: 3 },
      { destination: 'billing', payload: 4 },
    ]);
    await drain();
    const [nowhere, explode, proto, ok] = await rows();
    assert.deepEqual([nowhere.state, nowhere.attempts], ['dead', 1]);
    assert.match(nowhere.last_error ?? '', /no publisher named "nowhere" \(check "outbox.route" and "outbox.publishers"\)/);
    assert.deepEqual([explode.state, explode.attempts], ['dead', 1]);
    assert.match(explode.last_error ?? '', /"outbox.route" threw, so no publisher could be chosen: Error: no tenant header/);
    assert.deepEqual([proto.state, proto.attempts], ['dead', 1], 'an inherited property is not a publisher');
    assert.equal(ok.state, 'sent');
    assert.deepEqual(
      billing.calls.map((c) => c.message.payload),
      [4],
    );
  });

  // A broken timeout would hang the drain: fail instead.
  it('publishTimeout aborts a hanging publish and retries it with backoff, even a publisher that ignores the signal', {
    timeout: 20_000,
  }, async () => {
    let reason: unknown;
    const hanging = new RecordingPublisher(
      (_message, signal) =>
        new Promise<void>((_resolve, reject) =>
          signal.addEventListener('abort', () => {
            reason = signal.reason;
            reject(signal.reason);
          }),
        ),
    );
    const deaf = new RecordingPublisher(() => new Promise<void>(() => undefined));
    const { enqueue, drain } = await start({
      publishers: { hanging, deaf },
      claimTimeoutMs: 5000,
      publishTimeout: '300ms',
      retry: { attempts: 3, backoff: { delay: '1m', jitter: false } },
    });
    await enqueue([
      { destination: 'hanging', payload: 1 },
      { destination: 'deaf', payload: 2 },
    ]);
    const started = Date.now();
    await drain();
    const elapsed = Date.now() - started;
    assert.ok(elapsed < 3000, `the publishes were cut at the timeout (${elapsed} ms)`);
    for (const row of await rows()) {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempts, 1);
      assert.match(
        row.last_error ?? '',
        /PublishError \[QUEUEBOX_PUBLISH\]: the publish took longer than "outbox.publishTimeout" \(300 ms\) and was aborted/,
      );
      assert.ok(row.delay_ms > 50_000, `retried after the backoff (${row.delay_ms} ms)`);
    }
    assert.ok(hanging.calls[0].signal.aborted);
    assert.match(String(reason), /publishTimeout/);
    assert.ok(deaf.calls[0].signal.aborted, 'the deaf publisher was told too');
  });

  it('no publish starts with less lease left than publishTimeout: a claim that waited is renewed first', async () => {
    const left: Record<string, number> = {};
    const publisher = new RecordingPublisher(async (message) => {
      const [row] = await db.query<{ left_ms: number }>(
        'SELECT (extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000)::int AS left_ms FROM queuebox_outbox WHERE message_id = $1',
        [message.messageId],
      );
      left[String(message.payload)] = row.left_ms;
      // The first publish keeps the only slot for half the lease; the second claim waits for it.
      if (message.payload === 'first') await sleep(3000);
    });
    const { enqueue, drain } = await start({ publisher, claimTimeoutMs: 6000, publishTimeout: 5700, concurrency: 1, batchSize: 2 });
    await enqueue([
      { destination: 'a', payload: 'first' },
      { destination: 'a', payload: 'second' },
    ]);
    await drain();
    // Renewals every 2 s left the waiting claim about 5 s at 3 s: below 5.7 s, so it was renewed before its publish.
    assert.ok(left.second >= 5600, `lease left when the second publish started: ${left.second} ms`);
    assert.deepEqual(
      (await rows()).map((r) => r.state),
      ['sent', 'sent'],
    );
  });

  it('a claim with too little lease left whose renewal loses the claim is not published', async () => {
    const { messageId: waiting } = { messageId: '3f4f0c55-2d87-4a0f-9d0b-0f4a3c1f6e21' };
    const publisher = new RecordingPublisher(async (message) => {
      if (message.payload !== 'first') return;
      await sleep(2500);
      // After the keeper's renewal at 2 s, another owner takes the waiting row over.
      await db.query('UPDATE queuebox_outbox SET claim_token = gen_random_uuid() WHERE message_id = $1', [waiting]);
      await sleep(500);
    });
    const { enqueue, drain } = await start({ publisher, claimTimeoutMs: 6000, publishTimeout: 5700, concurrency: 1, batchSize: 2 });
    await enqueue([
      { destination: 'a', payload: 'first' },
      { destination: 'a', payload: 'second', messageId: waiting },
    ]);
    await drain();
    assert.deepEqual(
      publisher.calls.map((c) => c.message.payload),
      ['first'],
      'the second message was not published with a lease it no longer held',
    );
    const [, second] = await rows();
    assert.equal(second.state, 'processing', 'left to its new owner');
  });

  it('retry: false dead-letters on the first failure', async () => {
    const publisher = new RecordingPublisher(() => {
      throw new Error('broker said no');
    });
    const { enqueue, drain } = await start({ publisher, retry: false });
    await enqueue([{ destination: 'a', payload: 1 }]);
    await drain();
    const [row] = await rows();
    assert.deepEqual([row.state, row.attempts], ['dead', 1]);
    assert.match(row.last_error ?? '', /failed 1 attempt\(s\); last error: Error: broker said no/);
  });

  it('retryIf false dead-letters now; true retries with the backoff function, which receives (attempt, error, message)', async () => {
    const seen: [number, unknown, OutboundMessage][] = [];
    const retryIfCalls: [unknown, number, string][] = [];
    const publisher = new RecordingPublisher((message) => {
      throw message.payload === 'bad' ? new TypeError('invalid invoice') : new Error('timeout');
    });
    const { enqueue, drain } = await start({
      publisher,
      retry: {
        attempts: 5,
        backoff: (attempt, error, message) => {
          seen.push([attempt, error, message]);
          return 45_000;
        },
        retryIf: (error, attempt, message) => {
          retryIfCalls.push([error, attempt, message.messageId]);
          return !(error instanceof TypeError);
        },
      },
    });
    const [bad, flaky] = await enqueue([
      { destination: 'a', payload: 'bad' },
      { destination: 'a', payload: 'flaky' },
    ]);
    await drain();
    const [badRow, flakyRow] = await rows();
    assert.deepEqual([badRow.state, badRow.attempts], ['dead', 1]);
    assert.match(badRow.last_error ?? '', /not retried \("retryIf" returned false\) after attempt 1: TypeError: invalid invoice/);
    assert.deepEqual([flakyRow.state, flakyRow.attempts], ['pending', 1]);
    assert.match(flakyRow.last_error ?? '', /Error: timeout/);
    assert.ok(flakyRow.delay_ms > 40_000 && flakyRow.delay_ms <= 45_000, `the function's delay was used (${flakyRow.delay_ms} ms)`);
    assert.equal(seen.length, 1);
    assert.equal(seen[0][0], 1);
    assert.match(String(seen[0][1]), /Error: timeout/);
    assert.equal(seen[0][2].messageId, flaky.messageId);
    assert.deepEqual(
      retryIfCalls.map(([, attempt, id]) => [attempt, id]).sort(),
      [
        [1, bad.messageId],
        [1, flaky.messageId],
      ].sort(),
    );
  });
});
