import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';

// The per-message counters are looked up from a cache keyed by the label that varies (issue 29):
// each destination and each (component, source) must still get its own series.

const outboxEvent = (destination: string) => ({
  component: 'outbox' as const,
  id: '1',
  messageId: 'm',
  destination,
  key: null,
  attempt: 1,
  durationMs: 2,
});
const inboxEvent = (component: 'relay' | 'pull', source: string) => ({
  component,
  id: '1',
  source,
  idempotencyKey: 'k',
  aggregateId: null,
  attempt: 1,
  durationMs: 2,
});

describe('QueueBoxMetrics', () => {
  it('counts each message in the series of its destination, or of its component and source (the relay labelled inbox, as 0.1 and the design name it)', () => {
    const events = new QueueBoxEvents();
    const metrics = new QueueBoxMetrics(events);
    for (const destination of ['billing', 'shipping', 'billing', 'billing']) events.emit('queuebox:published', outboxEvent(destination));
    events.emit('queuebox:relay:processed', { ...inboxEvent('relay', 'orders'), forwarded: 1 });
    events.emit('queuebox:pull:processed', { ...inboxEvent('pull', 'orders'), handler: 'h' });
    events.emit('queuebox:pull:processed', { ...inboxEvent('pull', 'orders'), handler: 'h' });
    events.emit('queuebox:pull:processed', { ...inboxEvent('pull', 'ledger'), handler: 'h' });
    // An event whose component disagrees with its name is counted by what it says, as before the cache.
    events.emit('queuebox:pull:processed', { ...inboxEvent('relay', 'orders'), handler: 'h' } as never);
    assert.deepEqual(metrics.snapshot(), {
      'queuebox_outbox_messages_published_total{destination="billing"}': 3,
      'queuebox_outbox_messages_published_total{destination="shipping"}': 1,
      'queuebox_inbox_messages_processed_total{component="inbox",source="orders"}': 2,
      'queuebox_inbox_messages_processed_total{component="pull",source="orders"}': 2,
      'queuebox_inbox_messages_processed_total{component="pull",source="ledger"}': 1,
    });
    assert.equal(metrics.total('queuebox_outbox_messages_published_total'), 4);
  });
});
