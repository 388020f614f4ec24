import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import type * as OpenTelemetry from '@opentelemetry/api';
import { packageVersion } from '../common/package-version';
import { QUEUEBOX_IDENTITY } from '../common/queuebox.constants';
import { type QueueBoxEventMap, type QueueBoxEventName, QueueBoxEvents } from '../events/queuebox.events';
import type { QueueBoxIdentity } from '../types/instance';
import { COUNTERS, metricUpdate, type QueueBoxCounter } from './metric-definitions';

// QueueBox's metrics through the OpenTelemetry Meter API, beside the Prometheus ones
// (queuebox/prometheus): when `@opentelemetry/api` is installed, each QueueBox records on the meter
// `queuebox` of the global MeterProvider the application registered (the SDK's); without one the
// API's meter records nothing. The four messaging metrics of the OpenTelemetry semantic conventions
// where they fit, and every QueueBox counter under its own name. The gauges, which read the
// database, are module/opentelemetry-gauges.ts's.

/** The messaging semantic conventions' metrics QueueBox records. */
export const MESSAGING_METRICS = {
  sent: 'messaging.client.sent.messages',
  operationDuration: 'messaging.client.operation.duration',
  consumed: 'messaging.client.consumed.messages',
  processDuration: 'messaging.process.duration',
} as const;

/** The semantic conventions' buckets for the two duration histograms (seconds). */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** A QueueBox counter's or gauge's OpenTelemetry name: `queuebox_claims_lost_total` is `queuebox.claims_lost`. */
export function openTelemetryName(counter: string): string {
  return counter.replace(/^queuebox_/, 'queuebox.').replace(/_total$/, '');
}

let api: typeof OpenTelemetry | null | undefined;

function openTelemetry(): typeof OpenTelemetry | null {
  if (api === undefined) {
    try {
      api = require('@opentelemetry/api') as typeof OpenTelemetry;
    } catch {
      api = null;
    }
  }
  return api;
}

/**
 * The meter `queuebox` of the application's global MeterProvider, or undefined when
 * `@opentelemetry/api` is not installed or no MeterProvider is registered yet (the API's own meter
 * would drop every record).
 */
export function queueboxMeter(): OpenTelemetry.Meter | undefined {
  const otel = openTelemetry();
  if (!otel) return undefined;
  const meter = otel.metrics.getMeter('queuebox', packageVersion());
  return meter.constructor === otel.createNoopMeter().constructor ? undefined : meter;
}

/** The attributes of every QueueBox data point: the system and the QueueBox's name. */
export function openTelemetryAttributes(instance: QueueBoxIdentity): OpenTelemetry.Attributes {
  return { 'messaging.system': 'queuebox', 'queuebox.name': instance.name };
}

/** Outcome events of a publish or a processing attempt, and what failed them. */
const FAILED = new Set<QueueBoxEventName>([
  'queuebox:retry-scheduled',
  'queuebox:dead-lettered',
  'queuebox:relay:retry-scheduled',
  'queuebox:relay:dead-lettered',
  'queuebox:pull:retry-scheduled',
  'queuebox:pull:dead-lettered',
]);

/**
 * Records this QueueBox's events as OpenTelemetry metrics. Every data point carries
 * `messaging.system: queuebox` and `queuebox.name` (the QueueBox's name, `default` unless named).
 * The metrics API has no proxy: a meter taken before the SDK registered its MeterProvider records
 * nothing, ever. So the meter is taken when the module is made and, failing that, once the
 * application has bootstrapped; with no MeterProvider by then nothing is subscribed (no cost per
 * message): register the SDK before the application starts.
 */
@Injectable()
export class QueueBoxOpenTelemetryMetrics implements OnApplicationBootstrap, OnModuleDestroy {
  private unsubscribe?: () => void;

  constructor(
    private readonly events: QueueBoxEvents,
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
  ) {
    this.start();
  }

  onApplicationBootstrap(): void {
    if (!this.unsubscribe) this.start();
  }

  private start(): void {
    const { events, instance } = this;
    const meter = queueboxMeter();
    if (!meter) return;
    const base = openTelemetryAttributes(instance);
    const sent = meter.createCounter(MESSAGING_METRICS.sent, {
      unit: '{message}',
      description: 'Messages the outbox poller attempted to publish (each attempt).',
    });
    const operationDuration = meter.createHistogram(MESSAGING_METRICS.operationDuration, {
      unit: 's',
      description: 'Duration of one publish attempt.',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    const consumed = meter.createCounter(MESSAGING_METRICS.consumed, {
      unit: '{message}',
      description: 'Inbox messages handed to the relay or a pull handler (each attempt).',
    });
    const processDuration = meter.createHistogram(MESSAGING_METRICS.processDuration, {
      unit: 's',
      description: 'Duration of one relay forward or pull handler attempt, its commit included.',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    const counters = new Map<QueueBoxCounter, OpenTelemetry.Counter>(
      COUNTERS.map((counter) => [counter.name, meter.createCounter(openTelemetryName(counter.name), { description: counter.help })]),
    );
    this.unsubscribe = events.subscribe(<K extends QueueBoxEventName>(name: K, event: QueueBoxEventMap[K]) => {
      const update = metricUpdate(name, event);
      for (const counter of update.counters) counters.get(counter.name)?.add(counter.by, { ...base, ...counter.labels });
      if (!update.histogram) return;
      const e = event as { destination?: string; source?: string; component?: string };
      const failed = FAILED.has(name) ? { 'error.type': '_OTHER' } : {};
      if (update.histogram.name === 'queuebox_outbox_publish_duration_seconds') {
        const attributes = {
          ...base,
          'messaging.operation.name': 'publish',
          'messaging.operation.type': 'send',
          'messaging.destination.name': String(e.destination),
          ...failed,
        };
        sent.add(1, attributes);
        operationDuration.record(update.histogram.seconds, attributes);
      } else {
        const attributes = {
          ...base,
          'messaging.operation.name': 'process',
          'messaging.operation.type': 'process',
          'messaging.destination.name': String(e.source),
          'queuebox.component': String(e.component),
          ...failed,
        };
        consumed.add(1, attributes);
        processDuration.record(update.histogram.seconds, attributes);
      }
    });
  }

  onModuleDestroy(): void {
    this.unsubscribe?.();
  }
}
