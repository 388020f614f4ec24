import { Injectable } from '@nestjs/common';
import { QueueBoxEvents } from '../events/queuebox.events';
import { type Labels, metricUpdate, type QueueBoxCounter } from './metric-definitions';

export type { QueueBoxCounter } from './metric-definitions';

/**
 * In-process counters of one application, fed by its `QueueBoxEvents` and readable with `value()`,
 * `total()` and `snapshot()` (tests, scripts, a status page). For Prometheus, import
 * `QueueBoxPrometheusModule` from `queuebox/prometheus`, which adds histograms and backlog gauges.
 */
@Injectable()
export class QueueBoxMetrics {
  private readonly counters = new Map<string, number>();

  constructor(events: QueueBoxEvents) {
    events.subscribe((name, event) => {
      for (const counter of metricUpdate(name, event).counters) this.increment(counter.name, counter.labels, counter.by);
    });
  }

  /** The current value of one series (0 when it never moved). */
  value(name: QueueBoxCounter, labels: Labels = {}): number {
    return this.counters.get(seriesId(name, labels)) ?? 0;
  }

  /** Every series with its value, e.g. `{ 'queuebox_claims_lost_total{component="pull"}': 1 }`. */
  snapshot(): Record<string, number> {
    return Object.fromEntries(this.counters);
  }

  /** Sum of a counter over all its label sets. */
  total(name: QueueBoxCounter): number {
    let sum = 0;
    for (const [id, value] of this.counters) if (id === name || id.startsWith(`${name}{`)) sum += value;
    return sum;
  }

  private increment(name: QueueBoxCounter, labels: Labels, by: number): void {
    const id = seriesId(name, labels);
    this.counters.set(id, (this.counters.get(id) ?? 0) + by);
  }
}

function seriesId(name: string, labels: Labels): string {
  const keys = Object.keys(labels).sort();
  return keys.length === 0 ? name : `${name}{${keys.map((k) => `${k}="${labels[k]}"`).join(',')}}`;
}
