import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import { context, type Span, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { PermanentPublishError } from '../../lib/errors/queuebox.errors';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingBatchPublisher, RecordingPublisher } from '../support/recording-publisher';

const exporter = new InMemorySpanExporter();
const tracer = () => trace.getTracer('test');

let handlerFailures = 0;
const handledHeaders: Record<string, string>[] = [];

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 3, backoff: () => 0 })
  async handle(message: InboxMessage) {
    handledHeaders.push(message.headers);
    if (handlerFailures > 0) {
      handlerFailures--;
      throw new Error('ledger is closed');
    }
  }
}

/** Runs `work` inside a new active span and returns the span's ids with the result. */
async function inActiveSpan<T>(work: () => Promise<T>): Promise<{ traceId: string; spanId: string; result: T }> {
  return tracer().startActiveSpan('caller', async (span: Span) => {
    try {
      const result = await work();
      return { ...span.spanContext(), result };
    } finally {
      span.end();
    }
  });
}

const spansNamed = (name: string) => exporter.getFinishedSpans().filter((span) => span.name === name);

describeWithDatabase('trace context through the tables (OpenTelemetry)', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();

  before(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    t = await createTestApp(
      db.url,
      {
        workers: false,
        outbox: { publisher, maxAttempts: 3, backoff: () => 0 },
        inbox: { relay: { routes: { orders: (message) => ({ destination: 'billing', payload: message.payload }) } } },
      },
      { providers: [LedgerHandler] },
    );
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
    trace.disable();
    context.disable();
  });
  beforeEach(async () => {
    exporter.reset();
    publisher.calls.length = 0;
    publisher.behaviour = () => undefined;
    handledHeaders.length = 0;
  });

  const storedHeaders = async (table: string) =>
    (await db.query<{ headers: Record<string, string> }>(`SELECT headers FROM ${table}`))[0].headers;

  it('stores the active span as traceparent at enqueue; every publish attempt is its child, and the publisher sees the publish span', async () => {
    const caller = await inActiveSpan(() =>
      dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 1 } })),
    );
    assert.equal((await storedHeaders('queuebox_outbox')).traceparent, `00-${caller.traceId}-${caller.spanId}-01`);

    let failures = 1;
    publisher.behaviour = () => {
      if (failures-- > 0) throw new Error('broker down');
    };
    await t.get(OutboxPoller).runOnce(); // fails: retry
    await t.get(OutboxPoller).runOnce(); // published
    const spans = spansNamed('billing publish');
    assert.equal(spans.length, 2, 'one span per attempt');
    for (const span of spans) {
      assert.equal(span.spanContext().traceId, caller.traceId);
      assert.equal(span.parentSpanContext?.spanId, caller.spanId, 'the retry keeps the enqueue span as parent');
      assert.equal(span.attributes['messaging.message.id'], publisher.calls[0].message.messageId);
    }
    assert.deepEqual(
      spans.map((span) => span.status.code),
      [SpanStatusCode.ERROR, SpanStatusCode.UNSET],
    );
    assert.deepEqual(
      spans.map((span) => span.attributes['queuebox.attempt']),
      [1, 2],
    );
    const sent = publisher.calls[1].message.headers.traceparent;
    assert.equal(sent, `00-${caller.traceId}-${spans[1].spanContext().spanId}-01`, 'the destination continues from the publish span');
  });

  it('publishBatch: each message of a call has its own publish span, a child of its enqueue span, ended with its own result; the publisher sees each span in its headers', async () => {
    const batchPublisher = new RecordingBatchPublisher((messages) =>
      messages.map((message) =>
        (message.payload as { n: number }).n === 2
          ? { status: 'rejected', reason: new Error('broker refused 2') }
          : { status: 'fulfilled', value: undefined },
      ),
    );
    const own = await createTestApp(db.url, { workers: false, outbox: { publisher: batchPublisher, maxAttempts: 3, backoff: () => 0 } });
    try {
      const caller = await inActiveSpan(() =>
        own.app.get<DataSource>(getDataSourceToken()).transaction((manager) =>
          own.get(OutboxService).enqueueMany(
            manager,
            [1, 2, 3].map((n) => ({ destination: 'billing', payload: { n } })),
          ),
        ),
      );
      await own.get(OutboxPoller).runOnce();
      assert.equal(batchPublisher.batches.length, 1, 'one call for the three');
      const spans = spansNamed('billing publish');
      assert.equal(spans.length, 3, 'one span per message');
      const sent = batchPublisher.batches[0];
      for (const [i, message] of sent.entries()) {
        const span = spans.find((candidate) => candidate.attributes['messaging.message.id'] === message.messageId);
        assert.ok(span, `a span for message ${i + 1}`);
        assert.equal(span.spanContext().traceId, caller.traceId);
        assert.equal(span.parentSpanContext?.spanId, caller.spanId, 'its parent is the enqueue span');
        assert.equal(
          message.headers.traceparent,
          `00-${caller.traceId}-${span.spanContext().spanId}-01`,
          'the destination continues from it',
        );
        assert.equal(span.status.code, i === 1 ? SpanStatusCode.ERROR : SpanStatusCode.UNSET, `message ${i + 1}'s own result`);
      }
    } finally {
      await own.app.close();
    }
  });

  it('survives dead-letter and replay: the replayed publish joins the original trace', async () => {
    const caller = await inActiveSpan(() =>
      dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 2 } })),
    );
    publisher.behaviour = () => {
      throw new PermanentPublishError('rejected until the fix ships');
    };
    await t.get(OutboxPoller).runOnce();
    assert.equal((await db.query<{ state: string }>('SELECT state FROM queuebox_outbox'))[0].state, 'dead');
    publisher.behaviour = () => undefined;
    assert.equal(await t.get(QueueBoxAdmin).replayDeadLetters({ component: 'outbox', all: true }), 1);
    await t.get(OutboxPoller).runOnce();
    const spans = spansNamed('billing publish');
    assert.equal(spans.length, 2, 'the dead attempt and the replayed one');
    for (const span of spans) {
      assert.equal(span.spanContext().traceId, caller.traceId);
      assert.equal(span.parentSpanContext?.spanId, caller.spanId);
    }
  });

  it('stores the active span at receive; each pull attempt is its child; the relay forwards within the same trace', async () => {
    const caller = await inActiveSpan(() => t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'l-1', payload: {} }));
    assert.equal((await storedHeaders('queuebox_inbox')).traceparent, `00-${caller.traceId}-${caller.spanId}-01`);
    handlerFailures = 1;
    await t.get(PullWorker).runOnce('ledger');
    await t.get(PullWorker).runOnce('ledger');
    const spans = spansNamed('ledger process');
    assert.equal(spans.length, 2);
    for (const span of spans) assert.equal(span.parentSpanContext?.spanId, caller.spanId);
    assert.equal(handledHeaders[1].traceparent, handledHeaders[0].traceparent, 'the stored context survives the retry');

    exporter.reset();
    const sender = await inActiveSpan(() => t.get(InboxService).receive({ source: 'orders', idempotencyKey: 'o-1', payload: {} }));
    await t.get(InboxRelay).runOnce();
    const [relaySpan] = spansNamed('orders process');
    assert.equal(relaySpan.parentSpanContext?.spanId, sender.spanId);
    const forwarded = await db.query<{ headers: Record<string, string> }>('SELECT headers FROM queuebox_outbox');
    assert.equal(forwarded[0].headers.traceparent, `00-${sender.traceId}-${relaySpan.spanContext().spanId}-01`);
  });

  it('adds nothing when no span is active, and keeps a traceparent the caller set', async () => {
    await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: {} }));
    assert.equal((await storedHeaders('queuebox_outbox')).traceparent, undefined);
    await db.query('TRUNCATE queuebox_outbox');
    const chosen = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await inActiveSpan(() =>
      dataSource.transaction((manager) =>
        t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: {}, headers: { traceparent: chosen } }),
      ),
    );
    assert.equal((await storedHeaders('queuebox_outbox')).traceparent, chosen);
  });

  it('without @opentelemetry/api installed, headers are untouched and work runs without a span', () => {
    // A process in which `@opentelemetry/api` cannot be resolved, as in an app that does not install it.
    const preload = join(tmpdir(), `queuebox-no-otel-${process.pid}.js`);
    writeFileSync(
      preload,
      `const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request.startsWith('@opentelemetry/')) { const e = new Error("Cannot find module '" + request + "'"); e.code = 'MODULE_NOT_FOUND'; throw e; }
  return resolve.call(this, request, ...rest);
};`,
    );
    const module = join(__dirname, '../../lib/tracing/trace-context.js');
    const output = execFileSync(
      process.execPath,
      [
        '-r',
        preload,
        '-e',
        `const t = require(${JSON.stringify(module)});
t.inSpan({ traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }, () => t.publishSpan({ destination: 'd', messageId: 'm', attempt: 1 }), async () => 'ran')
  .then((ran) => console.log(JSON.stringify({ headers: t.withTraceContext({ a: '1' }), ran, otel: Object.keys(require.cache).some((k) => k.includes('@opentelemetry')) })));`,
      ],
      { encoding: 'utf8' },
    );
    assert.deepEqual(JSON.parse(output), { headers: { a: '1' }, ran: 'ran', otel: false });
  });
});
