import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import type * as OpenTelemetry from '@opentelemetry/api';
import { QueueBoxAdmin } from '../admin/queuebox.admin';
import { QUEUEBOX_IDENTITY } from '../common/queuebox.constants';
import { QueueBoxDoctor } from '../health/queuebox.doctor';
import { InboxSources } from '../inbox-runtime/inbox.sources';
import {
  BACKLOG_GAUGES,
  backlogLabel,
  DATABASE_WARNINGS_GAUGE,
  DEAD_LETTERS_GAUGE,
  deadLetterSeries,
  INSTANCES_GAUGE,
  instanceCounts,
  PAUSED_GAUGE,
} from '../metrics/metric-definitions';
import { openTelemetryAttributes, openTelemetryName, queueboxMeter } from '../metrics/opentelemetry.metrics';
import { OutboxPoller } from '../outbox/outbox.poller';
import type { QueueBoxIdentity } from '../types/instance';
import { ClaimPauses } from '../workers/claim-pauses';

/**
 * The gauges of queuebox/prometheus as OpenTelemetry observable gauges, beside the counters and
 * histograms of QueueBoxOpenTelemetryMetrics, under the same names and attributes: read at each
 * collection of the application's MetricReader (its export interval): one backlog query, one of
 * the instances table, one of each table's dead rows by error class, the pauses the claims read
 * (no query while the workers read them), the doctor's last examination. A read that fails leaves
 * its gauges without points for that collection (the health check reports the database). As for
 * the counters, the meter is taken when the module is made or else at bootstrap; with no
 * MeterProvider by then nothing is observed.
 */
@Injectable()
export class QueueBoxOpenTelemetryGauges implements OnApplicationBootstrap, OnModuleDestroy {
  private stop?: () => void;

  constructor(
    @Inject(QUEUEBOX_IDENTITY) private readonly instance: QueueBoxIdentity,
    private readonly admin: QueueBoxAdmin,
    private readonly doctor: QueueBoxDoctor,
    private readonly pauses: ClaimPauses,
    private readonly outbox: OutboxPoller,
    private readonly inbox: InboxSources,
  ) {
    this.start();
  }

  onApplicationBootstrap(): void {
    if (!this.stop) this.start();
  }

  onModuleDestroy(): void {
    this.stop?.();
  }

  private start(): void {
    const meter = queueboxMeter();
    if (!meter) return;
    const base = openTelemetryAttributes(this.instance);
    const gauge = (definition: { name: string; help: string }, unit?: string) =>
      meter.createObservableGauge(openTelemetryName(definition.name), { description: definition.help, unit });
    const backlog = BACKLOG_GAUGES.map((definition) => ({
      definition,
      gauge: gauge(definition, definition.field === 'oldestPendingAgeSeconds' ? 's' : '{message}'),
    }));
    const instances = gauge(INSTANCES_GAUGE, '{instance}');
    const warnings = gauge(DATABASE_WARNINGS_GAUGE, '{warning}');
    const paused = gauge(PAUSED_GAUGE);
    const deadLetters = gauge(DEAD_LETTERS_GAUGE, '{message}');
    const observe = async (result: OpenTelemetry.BatchObservableResult) => {
      const [rows, instanceRows, pauseRows, deadRows] = await Promise.allSettled([
        this.admin.backlog(),
        this.admin.instances(),
        this.pauses.rows(),
        deadLetterSeries((component) => this.admin.deadLetterClasses({ component })),
      ]);
      if (rows.status === 'fulfilled') {
        // Configured names read 0 when they have no row, as in Prometheus.
        const configured = { outbox: this.outbox.configuredDestinations(), inbox: this.inbox.consumedSources() };
        for (const { definition, gauge } of backlog) {
          const values = new Map(configured[definition.component].map((name) => [name, 0]));
          for (const row of rows.value) {
            if (row.component === definition.component) values.set(row.name, Number(row[definition.field] ?? 0));
          }
          for (const [name, value] of values) result.observe(gauge, value, { ...base, [backlogLabel(definition.component)]: name });
        }
      }
      if (instanceRows.status === 'fulfilled') {
        for (const [state, count] of Object.entries(instanceCounts(instanceRows.value)))
          result.observe(instances, count, { ...base, state });
      }
      if (pauseRows.status === 'fulfilled') {
        for (const row of pauseRows.value.slice(0, PAUSED_GAUGE.maxSeries)) {
          result.observe(paused, 1, { ...base, component: row.component, name: row.name });
        }
      }
      if (deadRows.status === 'fulfilled') {
        for (const s of deadRows.value) {
          result.observe(deadLetters, s.count, { ...base, component: s.component, name: s.name, error_class: s.errorClass });
        }
      }
      for (const [code, count] of this.doctor.warningCounts()) result.observe(warnings, count, { ...base, code });
    };
    const observables = [...backlog.map((b) => b.gauge), instances, warnings, paused, deadLetters];
    meter.addBatchObservableCallback(observe, observables);
    this.stop = () => meter.removeBatchObservableCallback(observe, observables);
  }
}
