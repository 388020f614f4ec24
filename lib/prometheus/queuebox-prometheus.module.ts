import { Injectable, Module, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getToken, makeCounterProvider, makeGaugeProvider, makeHistogramProvider } from '@willsoto/nestjs-prometheus';
import type { Counter, Gauge, Histogram } from 'prom-client';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { type QueueBoxEntry, QueueBoxRegistry } from '../core/queuebox.registry';
import type { BacklogRow, InstanceRow, InstanceState } from '../dialects/dialect-rows';
import { QueueBoxEvents } from '../events/queuebox.events';
import { QueueBoxDoctor } from '../health/queuebox.doctor';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import {
  BACKLOG_GAUGES,
  backlogLabel,
  COUNTERS,
  DATABASE_WARNINGS_GAUGE,
  DEAD_LETTERS_GAUGE,
  type DeadLetterSeries,
  deadLetterSeries,
  HISTOGRAMS,
  INSTANCES_GAUGE,
  instanceCounts,
  metricUpdate,
  PAUSED_GAUGE,
} from '../metrics/metric-definitions';
import { OutboxPoller } from '../outbox/outbox.poller';
import { ClaimPauses } from '../workers/claim-pauses';

/** Backlog gauges, set from one backlog query per scrape (their definitions are shared with OpenTelemetry). */
export const GAUGES = BACKLOG_GAUGES;

// The gauges of one scrape share one backlog query per QueueBox, and scrapes this close together
// (two Prometheus servers of an HA pair) share the backlog, dead-letter and instances reads: a read
// in flight, or one that finished this recently, is reused.
const READ_REUSE_MS = 500;

/** A read that scrapes share: the one in flight, or one that finished less than READ_REUSE_MS ago, else a new one. */
class RecentRead<T> {
  private last?: { value: Promise<T>; doneAt?: number };

  constructor(private readonly read: () => Promise<T>) {}

  get(): Promise<T> {
    const last = this.last;
    if (last && (last.doneAt === undefined || Date.now() - last.doneAt < READ_REUSE_MS)) return last.value;
    const next: { value: Promise<T>; doneAt?: number } = { value: this.read() };
    next.value.then(
      () => {
        next.doneAt = Date.now();
      },
      () => {
        // A failed read is not reused: the next scrape tries again.
        if (this.last === next) this.last = undefined;
      },
    );
    this.last = next;
    return next.value;
  }
}

/** The label every QueueBox metric carries: the QueueBox's name (`default` unless named). Not `instance`, which Prometheus gives the scrape target. */
export const QUEUEBOX_LABEL = 'queuebox';

/** What the exporter keeps per QueueBox: its event subscription, its recent reads, the names its gauges have shown. */
interface Watched {
  unsubscribe: () => void;
  backlog: RecentRead<BacklogRow[]>;
  deadLetters: RecentRead<DeadLetterSeries[]>;
  instances: RecentRead<InstanceRow[]>;
  /**
   * Destinations and sources seen in a backlog (plus the consumed sources): their gauges read 0
   * once drained instead of vanishing, so a dashboard shows 0 and `absent()` alerts stay quiet.
   */
  known: { outbox: Set<string>; inbox: Set<string> };
  /** Each gauge's last values per name, kept for a scrape whose backlog read fails. */
  last: Map<string, Map<string, number>>;
  /** The instances per state of the last read, kept for a scrape whose read fails. */
  lastInstances?: Record<InstanceState, number>;
  /** `queuebox_paused` (issue 40): every `component\u0000name` seen paused, 1 while paused and 0 after; kept for a failed read. */
  paused?: Map<string, number>;
  /** The dead-letter series of the last read, kept for a scrape whose read fails. */
  lastDeadLetters?: DeadLetterSeries[];
}

/**
 * Feeds the events of every QueueBox of the application (tenants too, as they come and go) into
 * prom-client counters and histograms labelled with the QueueBox's name, and reads each one's
 * backlog for the gauges when Prometheus scrapes (one query per QueueBox and scrape, through the
 * partial indexes).
 */
@Injectable()
export class QueueBoxPrometheusExporter implements OnModuleInit, OnModuleDestroy {
  private unwatch?: () => void;
  private readonly watched = new Map<QueueBoxEntry, Watched>();

  constructor(
    private readonly registry: QueueBoxRegistry,
    private readonly moduleRef: ModuleRef,
  ) {}

  onModuleInit(): void {
    const metric = <T>(name: string) => this.moduleRef.get<T>(getToken(name));
    const counters = new Map(COUNTERS.map(({ name }) => [name, metric<Counter>(name)]));
    const histograms = new Map(HISTOGRAMS.map(({ name }) => [name, metric<Histogram>(name)]));
    this.unwatch = this.registry.watch((change, entry) => {
      if (change === 'removed') {
        this.watched.get(entry)?.unsubscribe();
        this.watched.delete(entry);
        return;
      }
      const queuebox = { [QUEUEBOX_LABEL]: entry.name };
      const unsubscribe = entry.get(QueueBoxEvents).subscribe((name, event) => {
        const update = metricUpdate(name, event);
        for (const counter of update.counters) counters.get(counter.name)?.inc({ ...counter.labels, ...queuebox }, counter.by);
        if (update.histogram) {
          histograms.get(update.histogram.name)?.observe({ ...update.histogram.labels, ...queuebox }, update.histogram.seconds);
        }
      });
      this.watched.set(entry, {
        unsubscribe,
        backlog: new RecentRead(() => entry.get(QueueBoxAdmin).backlog()),
        deadLetters: new RecentRead(() => deadLetterSeries((component) => entry.get(QueueBoxAdmin).deadLetterClasses({ component }))),
        instances: new RecentRead(() => entry.get(QueueBoxAdmin).instances()),
        known: { outbox: new Set(), inbox: new Set() },
        last: new Map(),
      });
    });
  }

  onModuleDestroy(): void {
    this.unwatch?.();
    for (const watched of this.watched.values()) watched.unsubscribe();
    this.watched.clear();
  }

  /**
   * Sets one backlog gauge from each QueueBox's current backlog (prom-client calls it on each
   * scrape). A QueueBox whose read fails keeps its last values (its health check reports the
   * database); a detached tenant's series go.
   */
  async collect(gauge: Gauge, definition: GaugeDefinition): Promise<void> {
    const label = backlogLabel(definition.component);
    const series = await Promise.all(
      [...this.watched].map(async ([entry, watched]) => {
        const known = watched.known[definition.component];
        let rows: BacklogRow[];
        try {
          rows = await watched.backlog.get();
        } catch {
          return { entry, values: watched.last.get(definition.name) ?? new Map<string, number>() };
        }
        // Configured names from start-up (value 0), so an `absent()` alert does not fire on a fresh replica.
        const configured =
          definition.component === 'inbox' ? entry.get(InboxSources).consumedSources() : entry.get(OutboxPoller).configuredDestinations();
        for (const name of configured) known.add(name);
        const read = new Map<string, number>();
        for (const row of rows) {
          if (row.component !== definition.component) continue;
          known.add(row.name);
          read.set(row.name, Number(row[definition.field] ?? 0));
        }
        const values = new Map([...known].map((name) => [name, read.get(name) ?? 0]));
        watched.last.set(definition.name, values);
        return { entry, values };
      }),
    );
    gauge.reset();
    for (const { entry, values } of series) {
      for (const [name, value] of values) gauge.set({ [label]: name, [QUEUEBOX_LABEL]: entry.name }, value);
    }
  }

  /**
   * Sets `queuebox_instances{state}` from each QueueBox's instances table (one query per QueueBox,
   * reused by the scrapes of the next READ_REUSE_MS), every state present. A QueueBox whose read
   * fails keeps its last values.
   */
  async collectInstances(gauge: Gauge): Promise<void> {
    const counts = await Promise.all(
      [...this.watched].map(async ([entry, watched]) => {
        try {
          watched.lastInstances = instanceCounts(await watched.instances.get());
        } catch {
          // Its health check reports the database.
        }
        return { entry, read: watched.lastInstances };
      }),
    );
    gauge.reset();
    for (const { entry, read } of counts) {
      if (!read) continue;
      for (const state of INSTANCES_GAUGE.states) gauge.set({ state, [QUEUEBOX_LABEL]: entry.name }, read[state]);
    }
  }

  /** Sets `queuebox_database_warnings{code}` from each QueueBox's last doctor examination, every code present. */
  collectWarnings(gauge: Gauge): void {
    gauge.reset();
    for (const entry of this.watched.keys()) {
      for (const [code, count] of entry.get(QueueBoxDoctor).warningCounts()) gauge.set({ code, [QUEUEBOX_LABEL]: entry.name }, count);
    }
  }

  /**
   * Sets `queuebox_paused{component,name}` from the pauses each QueueBox's claims read
   * (`ClaimPauses`): no query while its workers read them within the shortest poll interval; else
   * (workers off, or idle loops of a longer interval) this scrape reads the small table, at most
   * once per that interval, and the claims reuse it. 1 for each pause, 0 for a name seen paused
   * before, at most PAUSED_GAUGE.maxSeries per QueueBox. A QueueBox whose read fails keeps its last values.
   */
  async collectPaused(gauge: Gauge): Promise<void> {
    const reads = await Promise.all(
      [...this.watched].map(async ([entry, watched]) => {
        try {
          const rows = await entry.get(ClaimPauses).rows();
          const values = new Map([...(watched.paused ?? new Map<string, number>()).keys()].map((id) => [id, 0]));
          for (const row of rows) values.set(`${row.component}\u0000${row.name}`, 1);
          // The paused ones first, then by component and name: a pause always has its series.
          const order = ([a, x]: [string, number], [b, y]: [string, number]) => y - x || (a < b ? -1 : a > b ? 1 : 0);
          watched.paused = new Map([...values].sort(order).slice(0, PAUSED_GAUGE.maxSeries));
        } catch {
          // Its health check reports the database.
        }
        return { entry, values: watched.paused };
      }),
    );
    gauge.reset();
    for (const { entry, values } of reads) {
      for (const [id, value] of values ?? []) {
        const [component, name] = id.split('\u0000');
        gauge.set({ component, name, [QUEUEBOX_LABEL]: entry.name }, value);
      }
    }
  }

  /**
   * Sets `queuebox_dead_letters{component, name, error_class}` from each QueueBox's dead rows (one
   * query per table, reused by the scrapes of the next READ_REUSE_MS): the DEAD_LETTERS_GAUGE.top
   * largest pairs of each component, the rest summed as `other`. A QueueBox whose read fails keeps
   * its last values.
   */
  async collectDeadLetters(gauge: Gauge): Promise<void> {
    const reads = await Promise.all(
      [...this.watched].map(async ([entry, watched]) => {
        try {
          watched.lastDeadLetters = await watched.deadLetters.get();
        } catch {
          // Its health check reports the database.
        }
        return { entry, series: watched.lastDeadLetters };
      }),
    );
    gauge.reset();
    for (const { entry, series } of reads) {
      for (const s of series ?? []) {
        gauge.set({ component: s.component, name: s.name, error_class: s.errorClass, [QUEUEBOX_LABEL]: entry.name }, s.count);
      }
    }
  }
}

type GaugeDefinition = (typeof GAUGES)[number];

/**
 * QueueBox metrics for `@willsoto/nestjs-prometheus`: counters, duration histograms, backlog
 * gauges and the instances by state, registered in prom-client's default registry (the one `PrometheusModule` serves), every
 * series labelled `queuebox` with the name of its QueueBox (`default` unless named).
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
    ...COUNTERS.map((definition) => makeCounterProvider({ ...definition, labelNames: [...definition.labelNames, QUEUEBOX_LABEL] })),
    ...HISTOGRAMS.map((definition) => makeHistogramProvider({ ...definition, labelNames: [...definition.labelNames, QUEUEBOX_LABEL] })),
    ...GAUGES.map((definition) =>
      makeGaugeProvider({
        name: definition.name,
        help: definition.help,
        labelNames: [backlogLabel(definition.component), QUEUEBOX_LABEL],
        inject: [QueueBoxPrometheusExporter],
        collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
          return exporter.collect(this, definition);
        },
      }),
    ),
    makeGaugeProvider({
      name: INSTANCES_GAUGE.name,
      help: INSTANCES_GAUGE.help,
      labelNames: [...INSTANCES_GAUGE.labelNames, QUEUEBOX_LABEL],
      inject: [QueueBoxPrometheusExporter],
      collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
        return exporter.collectInstances(this);
      },
    }),
    makeGaugeProvider({
      name: DATABASE_WARNINGS_GAUGE.name,
      help: DATABASE_WARNINGS_GAUGE.help,
      labelNames: [...DATABASE_WARNINGS_GAUGE.labelNames, QUEUEBOX_LABEL],
      inject: [QueueBoxPrometheusExporter],
      collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
        exporter.collectWarnings(this);
      },
    }),
    makeGaugeProvider({
      name: PAUSED_GAUGE.name,
      help: PAUSED_GAUGE.help,
      labelNames: [...PAUSED_GAUGE.labelNames, QUEUEBOX_LABEL],
      inject: [QueueBoxPrometheusExporter],
      collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
        return exporter.collectPaused(this);
      },
    }),
    makeGaugeProvider({
      name: DEAD_LETTERS_GAUGE.name,
      help: DEAD_LETTERS_GAUGE.help,
      labelNames: [...DEAD_LETTERS_GAUGE.labelNames, QUEUEBOX_LABEL],
      inject: [QueueBoxPrometheusExporter],
      collect(this: Gauge, exporter: QueueBoxPrometheusExporter) {
        return exporter.collectDeadLetters(this);
      },
    }),
  ],
  exports: [
    ...[...COUNTERS, ...HISTOGRAMS, ...GAUGES, INSTANCES_GAUGE, DATABASE_WARNINGS_GAUGE, PAUSED_GAUGE, DEAD_LETTERS_GAUGE].map(({ name }) =>
      getToken(name),
    ),
  ],
})
export class QueueBoxPrometheusModule {}
