// OpenTelemetry beyond the hand-written W3C fallback (issue 41, item 4): context travels through the
// tables by the application's global propagator (W3C trace context with baggage, or a custom
// propagator), and QueueBox's metrics are recorded through the Meter API, named by the messaging
// semantic conventions, read back with the SDK's in-memory exporters.
import assert from 'node:assert/strict';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import {
  type Context,
  context,
  metrics,
  propagation,
  ROOT_CONTEXT,
  type Span,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
  TraceFlags,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { DATABASE_WARNING_CODES } from '../../lib/health/database-doctor';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const spans = new InMemorySpanExporter();
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });

/** What the handler saw: the baggage of the active context while it ran. */
const handlerBaggage: (string | undefined)[] = [];

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { retry: { attempts: 3, backoff: { delay: 0 } } })
  async handle(_message: InboxMessage) {
    handlerBaggage.push(propagation.getBaggage(context.active())?.getEntry('tenant')?.value);
  }
}

/** A propagator of this test's own: one `x-test-trace` header, `<traceId>:<spanId>`. */
class TestPropagator implements TextMapPropagator {
  inject(active: Context, carrier: unknown, setter: TextMapSetter): void {
    const span = trace.getSpanContext(active);
    if (span) setter.set(carrier, 'x-test-trace', `${span.traceId}:${span.spanId}`);
  }
  extract(active: Context, carrier: unknown, getter: TextMapGetter): Context {
    const value = getter.get(carrier, 'x-test-trace');
    const [traceId, spanId] = String(value ?? '').split(':');
    if (!traceId || !spanId) return active;
    return trace.setSpanContext(active, { traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
  }
  fields(): string[] {
    return ['x-test-trace'];
  }
}

async function inActiveSpan<T>(
  work: () => Promise<T>,
  baggage?: Record<string, string>,
): Promise<{ traceId: string; spanId: string; result: T }> {
  const base = baggage
    ? propagation.setBaggage(
        ROOT_CONTEXT,
        propagation.createBaggage(Object.fromEntries(Object.entries(baggage).map(([k, v]) => [k, { value: v }]))),
      )
    : ROOT_CONTEXT;
  return context.with(base, () =>
    trace.getTracer('test').startActiveSpan('caller', async (span: Span) => {
      try {
        return { ...span.spanContext(), result: await work() };
      } finally {
        span.end();
      }
    }),
  );
}

const emptied = { truncate: ['queuebox_outbox', 'queuebox_inbox'] };
describeWithDatabase('OpenTelemetry: the global propagator and the Meter API', emptied, (db) => {
  let t: TestApp;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();

  before(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    t = await createTestApp(
      db.url,
      { workers: false, outbox: { publisher, retry: { attempts: 3, backoff: { delay: 0 } } } },
      { providers: [LedgerHandler] },
    );
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
    trace.disable();
    context.disable();
    propagation.disable();
    metrics.disable();
  });
  beforeEach(async () => {
    spans.reset();
    publisher.calls.length = 0;
    publisher.behaviour = () => undefined;
    handlerBaggage.length = 0;
    propagation.disable();
  });

  const storedHeaders = async (table: string) =>
    (await db.query<{ headers: Record<string, string> }>(`SELECT headers FROM ${table}`))[0].headers;
  const enqueue = () =>
    dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: { n: 1 } }));

  it('W3C trace context and baggage through the propagator: stored at enqueue, the publish span their child, both sent on', async () => {
    propagation.setGlobalPropagator(
      new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }),
    );
    const caller = await inActiveSpan(enqueue, { tenant: 'acme' });
    const stored = await storedHeaders('queuebox_outbox');
    assert.equal(stored.traceparent, `00-${caller.traceId}-${caller.spanId}-01`);
    assert.equal(stored.baggage, 'tenant=acme');
    let baggageInPublisher: string | undefined;
    publisher.behaviour = () => {
      baggageInPublisher = propagation.getBaggage(context.active())?.getEntry('tenant')?.value;
    };
    await t.get(OutboxPoller).runOnce();
    const [publish] = spans.getFinishedSpans().filter((span) => span.name === 'billing publish');
    assert.equal(publish.parentSpanContext?.spanId, caller.spanId);
    assert.equal(baggageInPublisher, 'acme', 'the publish runs in the extracted context, baggage included');
    const sent = publisher.calls[0].message.headers;
    assert.equal(sent.traceparent, `00-${caller.traceId}-${publish.spanContext().spanId}-01`);
    assert.equal(sent.baggage, 'tenant=acme');
  });

  it('baggage reaches a pull handler, on every attempt', async () => {
    propagation.setGlobalPropagator(
      new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }),
    );
    await inActiveSpan(() => t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'l-1', payload: {} }), { tenant: 'globex' });
    assert.equal((await storedHeaders('queuebox_inbox')).baggage, 'tenant=globex');
    await t.get(PullWorker).runOnce('ledger');
    assert.deepEqual(handlerBaggage, ['globex']);
  });

  it('a custom propagator: its own header is stored and read back, no traceparent is written', async () => {
    propagation.setGlobalPropagator(new TestPropagator());
    const caller = await inActiveSpan(enqueue);
    const stored = await storedHeaders('queuebox_outbox');
    assert.equal(stored['x-test-trace'], `${caller.traceId}:${caller.spanId}`);
    assert.equal(stored.traceparent, undefined);
    await t.get(OutboxPoller).runOnce();
    const [publish] = spans.getFinishedSpans().filter((span) => span.name === 'billing publish');
    assert.equal(publish.spanContext().traceId, caller.traceId);
    assert.equal(publish.parentSpanContext?.spanId, caller.spanId);
    assert.equal(publisher.calls[0].message.headers['x-test-trace'], `${caller.traceId}:${publish.spanContext().spanId}`);
  });

  it('no propagator registered: W3C traceparent, written by QueueBox itself', async () => {
    const caller = await inActiveSpan(enqueue, { tenant: 'acme' });
    const stored = await storedHeaders('queuebox_outbox');
    assert.equal(stored.traceparent, `00-${caller.traceId}-${caller.spanId}-01`);
    assert.equal(stored.baggage, undefined, 'no propagator: no baggage');
  });

  it('metrics through the Meter API, named by the messaging semantic conventions, beside QueueBox counters', async () => {
    // Delta temporality: what the earlier tests recorded is collected now and dropped.
    await reader.forceFlush();
    metricExporter.reset();
    await enqueue();
    await enqueue();
    let failures = 1;
    publisher.behaviour = () => {
      if (failures-- > 0) throw new Error('broker down');
    };
    await t.get(OutboxPoller).runOnce(); // one published, one failed
    await t.get(OutboxPoller).runOnce(); // the retry published
    await t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'm-1', payload: {} });
    await t.get(PullWorker).runOnce('ledger');
    await reader.forceFlush();
    const exported = metricExporter.getMetrics().at(-1);
    assert.ok(exported);
    const scope = exported.scopeMetrics.find((s) => s.scope.name === 'queuebox');
    assert.ok(scope, 'the meter is named queuebox');
    const metric = (name: string) => scope.metrics.find((m) => m.descriptor.name === name);
    const points = (name: string) => (metric(name)?.dataPoints ?? []) as DataPoint<number>[];
    const sent = points('messaging.client.sent.messages');
    const ok = sent.find((p) => p.attributes['error.type'] === undefined);
    const failed = sent.find((p) => p.attributes['error.type'] === '_OTHER');
    assert.equal(ok?.value, 2);
    assert.equal(failed?.value, 1);
    assert.deepEqual(ok?.attributes, {
      'messaging.system': 'queuebox',
      'queuebox.name': 'default',
      'messaging.operation.name': 'publish',
      'messaging.operation.type': 'send',
      'messaging.destination.name': 'billing',
    });
    const duration = metric('messaging.client.operation.duration');
    assert.equal(duration?.descriptor.unit, 's');
    const histogramPoints = (duration?.dataPoints ?? []) as DataPoint<Histogram>[];
    assert.equal(
      histogramPoints.reduce((sum, p) => sum + p.value.count, 0),
      3,
    );
    assert.deepEqual(histogramPoints[0].value.buckets.boundaries.slice(0, 3), [0.005, 0.01, 0.025], "the conventions' buckets");
    assert.equal(points('messaging.client.consumed.messages')[0]?.value, 1);
    assert.equal(points('messaging.client.consumed.messages')[0]?.attributes['messaging.destination.name'], 'ledger');
    assert.equal(((metric('messaging.process.duration')?.dataPoints ?? []) as DataPoint<Histogram>[])[0]?.value.count, 1);
    // Every Prometheus counter has its OpenTelemetry twin.
    assert.equal(
      points('queuebox.outbox_messages_published').reduce((sum, p) => sum + p.value, 0),
      2,
    );
    assert.equal(points('queuebox.outbox_messages_retried')[0]?.value, 1);
    assert.equal(points('queuebox.inbox_messages_received')[0]?.attributes.source, 'ledger');
  });

  it('the gauges of queuebox/prometheus as observable gauges, read from the database at each collection', async () => {
    await enqueue();
    await enqueue();
    await t.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'g-1', payload: {} });
    await t.get(QueueBoxAdmin).pause({ component: 'outbox', name: 'billing', reason: 'gauge test' });
    await db.query(`UPDATE queuebox_outbox SET state = 'dead' WHERE id = (SELECT min(id) FROM queuebox_outbox)`);
    const collect = async () => {
      await reader.forceFlush();
      const scope = metricExporter
        .getMetrics()
        .at(-1)
        ?.scopeMetrics.find((s) => s.scope.name === 'queuebox');
      assert.ok(scope, 'the meter is named queuebox');
      return (name: string, attributes: Record<string, string>) =>
        (scope.metrics.find((m) => m.descriptor.name === name)?.dataPoints as DataPoint<number>[] | undefined)?.find((p) =>
          Object.entries(attributes).every(([key, value]) => p.attributes[key] === value),
        )?.value;
    };
    let gauge = await collect();
    const base = { 'messaging.system': 'queuebox', 'queuebox.name': 'default' };
    assert.equal(gauge('queuebox.outbox_pending_messages', { ...base, destination: 'billing' }), 1);
    assert.equal(gauge('queuebox.outbox_dead_messages', { ...base, destination: 'billing' }), 1);
    assert.equal(gauge('queuebox.outbox_processing_messages', { ...base, destination: 'billing' }), 0);
    assert.equal(gauge('queuebox.inbox_pending_messages', { ...base, source: 'ledger' }), 1);
    assert.equal(typeof gauge('queuebox.inbox_oldest_pending_age_seconds', { ...base, source: 'ledger' }), 'number');
    assert.equal(gauge('queuebox.paused', { ...base, component: 'outbox', name: 'billing' }), 1);
    assert.equal(gauge('queuebox.instances', { ...base, state: 'dead' }), 0);
    // The dead row has no attempt history: its error class is `unknown`, as in Prometheus.
    assert.equal(gauge('queuebox.dead_letters', { ...base, component: 'outbox', name: 'billing', error_class: 'unknown' }), 1);
    // Every code has its point (0 unless the doctor's last examination found it).
    for (const code of DATABASE_WARNING_CODES) assert.equal(typeof gauge('queuebox.database_warnings', { ...base, code }), 'number', code);
    // Read again at the next collection: the database as it is now.
    await t.get(QueueBoxAdmin).resume({ component: 'outbox', name: 'billing' });
    await db.query(`DELETE FROM queuebox_outbox WHERE state = 'pending'`);
    gauge = await collect();
    assert.equal(gauge('queuebox.outbox_pending_messages', { ...base, destination: 'billing' }), 0);
    assert.equal(gauge('queuebox.paused', { ...base, component: 'outbox', name: 'billing' }), undefined);
    await db.query(`DELETE FROM queuebox_outbox WHERE state = 'dead'`);
    gauge = await collect();
    assert.equal(
      gauge('queuebox.dead_letters', { ...base, component: 'outbox', name: 'billing', error_class: 'unknown' }),
      undefined,
      'no dead row: no point',
    );
  });
});
