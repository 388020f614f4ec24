import { Injectable } from '@nestjs/common';
import type { ClaimComponent } from '../lease/lease.types';

/** The counters QueueBox keeps. Names follow Prometheus conventions (`queuebox_` prefix, `_total`). */
export type QueueBoxCounter =
  | 'queuebox_claims_lost_total'
  | 'queuebox_outbox_messages_reclaimed_total'
  | 'queuebox_outbox_messages_published_total'
  | 'queuebox_outbox_messages_retried_total'
  | 'queuebox_outbox_messages_dead_lettered_total'
  | 'queuebox_inbox_messages_received_total'
  | 'queuebox_inbox_messages_duplicates_total'
  | 'queuebox_inbox_messages_processed_total'
  | 'queuebox_inbox_messages_retried_total'
  | 'queuebox_inbox_messages_dead_lettered_total'
  | 'queuebox_inbox_messages_reclaimed_total';

type Labels = Record<string, string>;

/**
 * In-process counters, readable with `value()`. Every worker reports through this one service, so
 * an exporter (Prometheus, OpenTelemetry) only has to read or wrap it.
 */
@Injectable()
export class QueueBoxMetrics {
  private readonly counters = new Map<string, number>();

  increment(name: QueueBoxCounter, labels: Labels = {}, by = 1): void {
    const id = seriesId(name, labels);
    this.counters.set(id, (this.counters.get(id) ?? 0) + by);
  }

  claimLost(component: ClaimComponent): void {
    this.increment('queuebox_claims_lost_total', { component });
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
}

function seriesId(name: string, labels: Labels): string {
  const keys = Object.keys(labels).sort();
  return keys.length === 0 ? name : `${name}{${keys.map((k) => `${k}="${labels[k]}"`).join(',')}}`;
}
