import { Injectable } from '@nestjs/common';
import { type QueueBoxEventMap, type QueueBoxEventName, QueueBoxEvents } from '../events/queuebox.events';
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
  /**
   * The series a per-message event moves (one published or processed message), by destination or
   * by component and source: looked up instead of built for every message.
   */
  private readonly messageSeries = new Map<QueueBoxEventName, Map<string, string>>();

  constructor(events: QueueBoxEvents) {
    events.subscribe((name, event) => {
      const series = this.messageSeriesOf(name, event);
      if (series !== undefined) {
        this.counters.set(series, (this.counters.get(series) ?? 0) + 1);
        return;
      }
      for (const counter of metricUpdate(name, event).counters) this.increment(counter.name, counter.labels, counter.by);
    });
  }

  /**
   * The one series a message's success moves, from a cache keyed by the field that labels it;
   * undefined for every other event (those go through `metricUpdate`, the shared mapping, which
   * also fills the cache: the series is the one it names).
   */
  private messageSeriesOf(name: QueueBoxEventName, event: unknown): string | undefined {
    const label = perMessageLabel(name, event);
    if (label === undefined) return undefined;
    let byLabel = this.messageSeries.get(name);
    if (!byLabel) {
      byLabel = new Map();
      this.messageSeries.set(name, byLabel);
    }
    let series = byLabel.get(label);
    if (series === undefined) {
      const [counter] = metricUpdate(name, event as QueueBoxEventMap[typeof name]).counters;
      series = seriesId(counter.name, counter.labels);
      byLabel.set(label, series);
    }
    return series;
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

/**
 * What labels the counter of a per-message success event (one counter, moved by 1): the
 * destination of a published message, the source of a processed one (whose component the event
 * name says: an event that says otherwise is not cached). Undefined for the other events.
 */
function perMessageLabel(name: QueueBoxEventName, event: unknown): string | undefined {
  switch (name) {
    case 'queuebox:published':
      return String((event as QueueBoxEventMap['queuebox:published']).destination);
    case 'queuebox:relay:processed':
    case 'queuebox:pull:processed': {
      const e = event as QueueBoxEventMap['queuebox:relay:processed'] | QueueBoxEventMap['queuebox:pull:processed'];
      return e.component === (name === 'queuebox:relay:processed' ? 'relay' : 'pull') ? String(e.source) : undefined;
    }
    default:
      return undefined;
  }
}

function seriesId(name: string, labels: Labels): string {
  const keys = Object.keys(labels).sort();
  return keys.length === 0 ? name : `${name}{${keys.map((k) => `${k}="${labels[k]}"`).join(',')}}`;
}
