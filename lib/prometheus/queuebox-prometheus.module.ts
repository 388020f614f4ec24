import { Injectable, Module, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getToken, makeCounterProvider, makeGaugeProvider, makeHistogramProvider } from '@willsoto/nestjs-prometheus';
import type { Counter, Gauge, Histogram } from 'prom-client';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import type { BacklogRow } from '../dialects/dialect-rows';
import { QueueBoxEvents } from '../events/queuebox.events';
import { COUNTERS, HISTOGRAMS, metricUpdate } from '../metrics/metric-definitions';
import { InboxSources } from '../workers/inbox-sources';

/** Backlog gauges, set from one backlog query per scrape. */
export const GAUGES = [
  { name: 'queuebox_outbox_pending_messages', help: 'Outbox rows pending (due or scheduled).', field: 'pending', component: 'outbox' },
  { name: 'queuebox_outbox_processing_messages', help: 'Outbox rows claimed by a worker now.', field: 'processing', component: 'outbox' },
  { name: 'queuebox_outbox_dead_messages', help: 'Outbox rows dead (waiting for replay or discard).', field: 'dead', component: 'outbox' },
  {
    name: 'queuebox_outbox_oldest_pending_age_seconds',
    help: 'Age of the oldest due pending outbox row (0 when none is due).',
    field: 'oldestPendingAgeSeconds',
    component: 'outbox',
  },
  { name: 'queuebox_inbox_pending_messages', help: 'Inbox rows pending (due or scheduled).', field: 'pending', component: 'inbox' },
  {
    name: 'queuebox_inbox_processing_messages',
    help: 'Inbox rows claimed by the relay or a pull worker now.',
    field: 'processing',
    component: 'inbox',
  },
  { name: 'queuebox_inbox_dead_messages', help: 'Inbox rows dead (waiting for replay or discard).', field: 'dead', component: 'inbox' },
  {
    name: 'queuebox_inbox_oldest_pending_age_seconds',
    help: 'Age of the oldest due pending inbox row (0 when none is due).',
    field: 'oldestPendingAgeSeconds',
    component: 'inbox',
  },
] as const;

// The gauges of one scrape share one backlog query: a query in flight, or one that finished this
// recently, is reused.
const BACKLOG_REUSE_MS = 500;

/**
 * Feeds QueueBox's events into prom-client counters and histograms, and reads the backlog for the
 * gauges when Prometheus scrapes (one query per scrape, through the partial indexes).
 */
@Injectable()
export class QueueBoxPrometheusExporter implements OnModuleInit, OnModuleDestroy {
  private unsubscribe?: () => void;
  private backlog?: { rows: Promise<BacklogRow[]>; doneAt?: number };
  /**
   * Destinations and sources seen in a backlog (plus the consumed sources): their gauges read 0
   * once drained instead of vanishing, so a dashboard shows 0 and `absent()` alerts stay quiet.
   */
  private readonly known = { outbox: new Set<string>(), inbox: new Set<string>() };

  constructor(
    private readonly events: QueueBoxEvents,
    private readonly admin: QueueBoxAdmin,
    private readonly moduleRef: ModuleRef,
    private readonly sources: InboxSources,
  ) {}

  onModuleInit(): void {
    const metric = <T>(name: string) => this.moduleRef.get<T>(getToken(name));
    const counters = new Map(COUNTERS.map(({ name }) => [name, metric<Counter>(name)]));
    const histograms = new Map(HISTOGRAMS.map(({ name }) => [name, metric<Histogram>(name)]));
    this.unsubscribe = this.events.subscribe((name, event) => {
      const update = metricUpdate(name, event);
      for (const counter of update.counters) counters.get(counter.name)?.inc(counter.labels, counter.by);
      if (update.histogram) histograms.get(update.histogram.name)?.observe(update.histogram.labels, update.histogram.seconds);
    });
  }

  onModuleDestroy(): void {
    this.unsubscribe?.();
  }

  /** Sets one backlog gauge from the current backlog (prom-client calls it on each scrape). */
  async collect(gauge: Gauge, definition: GaugeDefinition): Promise<void> {
    let rows: BacklogRow[];
    try {
      rows = await this.currentBacklog();
    } catch {
      return; // The gauges keep their last values; the health check reports an unreachable database.
    }
    const known = this.known[definition.component];
    for (const source of definition.component === 'inbox' ? this.sources.consumedSources() : []) known.add(source);
    const values = new Map<string, number>();
    for (const row of rows) {
      if (row.component !== definition.component) continue;
      known.add(row.name);
      values.set(row.name, Number(row[definition.field] ?? 0));
    }
    gauge.reset();
    for (const name of known) gauge.set({ [labelOf(definition)]: name }, values.get(name) ?? 0);
  }

  /** The backlog query in flight, or one that finished less than BACKLOG_REUSE_MS ago, or a new one. */
  private currentBacklog(): Promise<BacklogRow[]> {
    const fresh = this.backlog && (this.backlog.doneAt === undefined || Date.now() - this.backlog.doneAt < BACKLOG_REUSE_MS);
    if (this.backlog && fresh) return this.backlog.rows;
    const read: { rows: Promise<BacklogRow[]>; doneAt?: number } = { rows: this.admin.backlog() };
    read.rows.then(
      () => {
        read.doneAt = Date.now();
      },
      () => {
        if (this.backlog === read) this.backlog = undefined;
      },
    );
    this.backlog = read;
    return read.rows;
  }
}

type GaugeDefinition = (typeof GAUGES)[number];
const labelOf = (definition: GaugeDefinition) => (definition.component === 'outbox' ? 'destination' : 'source');

/**
 * QueueBox metrics for `@willsoto/nestjs-prometheus`: counters, duration histograms and backlog
 * gauges, registered in prom-client's default registry (the one `PrometheusModule` serves).
 * Import it next to `PrometheusModule.register()`; without it, QueueBox registers no metric.
 * Every metric can be injected with `@InjectMetric(name)`.
 *
 * @example
 * @Module({ imports: [PrometheusModule.register(), QueueBoxModule.forRoot({ ... }), QueueBoxPrometheusModule] })
 * export class AppModule {}
 */
@Module({
  providers: [
    QueueBoxPrometheusExporter,
    ...COUNTERS.map((definition) => makeCounterProvider({ ...definition })),
    ...HISTOGRAMS.map((definition) => makeHistogramProvider({ ...definition })),
    ...GAUGES.map((definition) =>
      makeGaugeProvider({
        name: definition.name,
        help: definition.help,
        labelNames: [labelOf(definition)],
        inject: [QueueBoxPrometheusExporter],
        collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
          return exporter.collect(this, definition);
        },
      }),
    ),
  ],
  exports: [...[...COUNTERS, ...HISTOGRAMS, ...GAUGES].map(({ name }) => getToken(name))],
})
export class QueueBoxPrometheusModule {}
