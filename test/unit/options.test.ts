import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseTableName } from '../../lib/common/identifiers';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { createQueueBoxMigration } from '../../lib/migrations/queuebox.migration';
import { resolveOptions } from '../../lib/options/options.resolver';

const publisher = { publish: async () => undefined };

function rejects(options: unknown, option: string, fragment: string) {
  assert.throws(
    () => resolveOptions(options as never),
    (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, `expected QueueBoxConfigError, got ${String(error)}`);
      assert.equal(error.option, option);
      assert.match(error.message, new RegExp(fragment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
      return true;
    },
  );
}

describe('options (I10)', () => {
  it('fills in the seed defaults', () => {
    const resolved = resolveOptions({ outbox: { publisher } });
    assert.equal(resolved.outbox.leaseMs, 300_000);
    assert.equal(resolved.outbox.reclaimIntervalMs, 60_000);
    assert.equal(resolved.outbox.pollIntervalMs, 1000);
    assert.equal(resolved.outbox.batchSize, 50);
    assert.equal(resolved.outbox.concurrency, 10);
    assert.equal(resolved.outbox.shutdownTimeoutMs, 10_000);
    assert.equal(resolved.outbox.maxAttempts, 10);
    assert.equal(resolved.maxPayloadBytes, 1_048_576);
    assert.equal(resolved.outbox.sentRows, 'keep');
    assert.deepEqual(resolved.workers, { outbox: true, relay: true, pull: true });
    assert.equal(resolved.tables.outbox.qualified, 'queuebox_outbox');
    assert.equal(resolved.tables.inbox.qualified, 'queuebox_inbox');
  });

  it('derives the reclaim interval from the lease', () => {
    const resolved = resolveOptions({ outbox: { publisher, claimTimeoutMs: 3000 } });
    assert.equal(resolved.outbox.leaseMs, 3000);
    assert.equal(resolved.outbox.reclaimIntervalMs, 600);
  });

  it('names the bad option', () => {
    rejects({ outbox: { publisher, claimTimeoutMs: -1 } }, 'outbox.claimTimeoutMs', 'must be an integer from 100');
    rejects({ outbox: { publisher, batchSize: 1.5 } }, 'outbox.batchSize', 'got 1.5');
    rejects({ outbox: { publisher, concurrency: '10' } }, 'outbox.concurrency', 'got "10"');
    rejects({ outbox: { publisher, maxAttempts: 0 } }, 'outbox.maxAttempts', 'from 1');
    rejects({ outbox: { publisher, backoff: { factor: 0.5 } } }, 'outbox.backoff.factor', 'from 1 to 100');
    rejects({ outbox: { publisher, backoff: { initialMs: 10, maxMs: 5 } } }, 'outbox.backoff.maxMs', 'must not be below');
    rejects({ workers: { outbox: 'yes' } }, 'workers.outbox', 'true or false');
    rejects({ workers: false, maxPayloadBytes: 0 }, 'maxPayloadBytes', 'from 1');
    rejects({ outbox: { publisher, sentRows: 'drop' } }, 'outbox.sentRows', `must be 'keep' (sent rows stay`);
    rejects({ outbox: { publisher, sentRows: true } }, 'outbox.sentRows', 'got true');
    assert.equal(resolveOptions({ outbox: { publisher, sentRows: 'delete' } }).outbox.sentRows, 'delete');
  });

  it('rejects unknown options and suggests the right spelling', () => {
    rejects({ outbox: { publisher, pollIntervalMS: 5 } }, 'outbox.pollIntervalMS', 'Did you mean "outbox.pollIntervalMs"?');
    rejects({ outbx: {} }, 'outbx', 'Unknown QueueBox option "outbx"');
  });

  it('one retry vocabulary: the older maxAttempts and backoff still work, each with a deprecation line naming its retry form', () => {
    const older = resolveOptions({ outbox: { publisher, maxAttempts: 3, backoff: { initialMs: 10, maxMs: 20, jitter: false } } });
    assert.equal(older.outbox.maxAttempts, 3);
    assert.equal(older.outbox.backoff(2, new Error('x'), undefined), 20);
    assert.equal(older.deprecations.length, 2);
    assert.match(older.deprecations[0], /Option outbox\.maxAttempts is deprecated .* use outbox\.retry \(retry: \{ attempts \}\)/);
    assert.match(older.deprecations[1], /Option outbox\.backoff is deprecated .*initialMs is delay, maxMs is maxDelay/);
    const current = resolveOptions({ outbox: { publisher, retry: { attempts: 3, backoff: { delay: 10, maxDelay: 20, jitter: false } } } });
    assert.deepEqual(current.deprecations, [], 'the retry form warns of nothing');
    assert.equal(current.outbox.backoff(2, new Error('x'), undefined), 20, 'the same delays as the older form');
  });

  it('suggests the retry names for the older ones written inside retry (initialMs is delay, maxMs is maxDelay)', () => {
    rejects(
      { outbox: { publisher, retry: { backoff: { initialMs: 1 } } } },
      'outbox.retry.backoff.initialMs',
      'Did you mean "outbox.retry.backoff.delay"?',
    );
    rejects(
      { outbox: { publisher, retry: { backoff: { maxMs: 1 } } } },
      'outbox.retry.backoff.maxMs',
      'Did you mean "outbox.retry.backoff.maxDelay"?',
    );
    rejects({ workers: false, pull: { retry: { maxAttempts: 3 } } }, 'pull.retry.maxAttempts', 'Did you mean "pull.retry.attempts"?');
  });

  it('requires a publisher only when the outbox worker runs', () => {
    rejects({}, 'outbox.publisher', 'no publisher is configured');
    assert.doesNotThrow(() => resolveOptions({ workers: { outbox: false } }));
    assert.doesNotThrow(() => resolveOptions({ workers: false }));
    rejects({ outbox: { publisher: {} } }, 'outbox.publisher', 'publish(message, signal)');
    rejects({ outbox: { publisher, publishers: { a: publisher } } }, 'outbox.publisher', 'not both');
    rejects({ outbox: { publishers: { a: { send() {} } } } }, 'outbox.publishers.a', 'publish(message, signal)');
  });

  it('routes to the only publisher, or by destination when there are several', () => {
    const one = resolveOptions({ outbox: { publishers: { http: publisher } } });
    assert.equal(one.outbox.route({ destination: 'x' } as never), 'http');
    const two = resolveOptions({ outbox: { publishers: { a: publisher, b: publisher } } });
    assert.equal(two.outbox.route({ destination: 'b' } as never), 'b');
  });

  it('validates table names and allows a schema', () => {
    assert.deepEqual(parseTableName('t', 'messaging.outbox'), { schema: 'messaging', name: 'outbox', qualified: 'messaging.outbox' });
    for (const bad of ['', 'a.b.c', 'outbox; DROP TABLE users', '"quoted"', '1abc', 'a-b', 'x'.repeat(49), 'a.', null, 42]) {
      rejects({ workers: false, tables: { outbox: bad } }, 'tables.outbox', 'must be a table name');
    }
    rejects({ workers: false, tables: { outbox: 'same', inbox: 'same' } }, 'tables', 'give each table its own name');
  });

  it('instances: heartbeats every 3 s, dead after 15 s, in the outbox table’s schema; bounds, three heartbeats and unknown keys refused by name', () => {
    const resolved = resolveOptions({ workers: false });
    assert.deepEqual(resolved.instances, { heartbeatMs: 3000, deadAfterMs: 15_000 });
    assert.equal(resolved.tables.instances.qualified, 'queuebox_instances');
    assert.equal(
      resolveOptions({ workers: false, tables: { outbox: 'messaging.out' } }).tables.instances.qualified,
      'messaging.queuebox_instances',
    );
    assert.equal(resolveOptions({ workers: false, tables: { instances: 'ops.nodes' } }).tables.instances.qualified, 'ops.nodes');
    assert.deepEqual(resolveOptions({ workers: false, instances: { heartbeatMs: 500, deadAfterMs: 1500 } }).instances, {
      heartbeatMs: 500,
      deadAfterMs: 1500,
    });
    rejects({ workers: false, instances: { heartbeatMs: 50 } }, 'instances.heartbeatMs', 'from 100 to 60000');
    rejects({ workers: false, instances: { deadAfterMs: 500 } }, 'instances.deadAfterMs', 'from 1000 to');
    rejects({ workers: false, instances: { heartbeatMs: 1000, deadAfterMs: 2999 } }, 'instances.deadAfterMs', 'at least 3000 ms');
    rejects({ workers: false, instances: { heartbeatMS: 1000 } }, 'instances.heartbeatMS', 'heartbeatMs');
    rejects({ workers: false, tables: { outbox: 'x', instances: 'x' } }, 'tables', 'give each table its own name');
  });

  it('validates the migration factory options the same way', () => {
    assert.throws(() => createQueueBoxMigration({ tables: { inbox: 'x y' } }), QueueBoxConfigError);
    assert.throws(() => createQueueBoxMigration({ name: 'NoTimestamp' }), /13-digit timestamp/);
    assert.equal(new (createQueueBoxMigration({ name: 'Billing1764460800001' }))().name, 'Billing1764460800001');
  });
});

describe('retention options', () => {
  it('is off by default, with 7 days for finished rows, dead rows kept, hourly batches of 1000', () => {
    assert.deepEqual(resolveOptions({ workers: false }).retention, {
      enabled: false,
      finishedAfterMs: 7 * 24 * 3600_000,
      inboxFinishedAfterMs: 7 * 24 * 3600_000,
      deadAfterMs: false,
      intervalMs: 3600_000,
      batchSize: 1000,
    });
  });

  it('takes the inbox age from finishedAfterMs, never below the one-hour dedupe minimum', () => {
    assert.equal(
      resolveOptions({ workers: false, retention: { finishedAfterMs: 2 * 3600_000 } }).retention.inboxFinishedAfterMs,
      2 * 3600_000,
    );
    assert.equal(resolveOptions({ workers: false, retention: { finishedAfterMs: 60_000 } }).retention.inboxFinishedAfterMs, 3600_000);
    const r = resolveOptions({
      workers: false,
      retention: { enabled: true, inboxFinishedAfterMs: 30 * 24 * 3600_000, deadAfterMs: 86_400_000 },
    });
    assert.equal(r.retention.inboxFinishedAfterMs, 30 * 24 * 3600_000);
    assert.equal(r.retention.deadAfterMs, 86_400_000);
    assert.equal(resolveOptions({ workers: false, retention: { deadAfterMs: false } }).retention.deadAfterMs, false);
  });

  it('rejects bad retention options by name', () => {
    rejects({ workers: false, retention: { inboxFinishedAfterMs: 60_000 } }, 'retention.inboxFinishedAfterMs', 'dedupes a redelivery');
    rejects({ workers: false, retention: { batchsize: 10 } }, 'retention.batchsize', 'Did you mean "retention.batchSize"');
    rejects({ workers: false, retention: { enabled: 'yes' } }, 'retention.enabled', 'must be true or false');
    rejects({ workers: false, retention: { deadAfterMs: true } }, 'retention.deadAfterMs', 'must be an integer');
    rejects({ workers: false, retention: { finishedAfterMs: 10 } }, 'retention.finishedAfterMs', 'from 60000');
    rejects({ workers: false, retention: { batchSize: 0 } }, 'retention.batchSize', 'from 1 to 10000');
    rejects({ workers: false, retention: [] }, 'retention', 'must be an object');
  });
});

describe('logging options', () => {
  it('has per-message lines off by default; logging.messages turns them on', () => {
    assert.deepEqual(resolveOptions({ workers: false }).logging, { messages: false });
    assert.deepEqual(resolveOptions({ workers: false, logging: {} }).logging, { messages: false });
    assert.deepEqual(resolveOptions({ workers: false, logging: { messages: true } }).logging, { messages: true });
  });

  it('rejects bad logging options by name', () => {
    rejects({ workers: false, logging: { messages: 'yes' } }, 'logging.messages', 'must be true or false');
    rejects({ workers: false, logging: { message: true } }, 'logging.message', 'Did you mean "logging.messages"');
    rejects({ workers: false, logging: true }, 'logging', 'must be an object');
  });
});

describe('outbox.rateLimits', () => {
  const publisher = { publish: async () => undefined };
  const rejects = (rateLimits: unknown, option: string) =>
    assert.throws(
      () => resolveOptions({ outbox: { publisher, rateLimits } } as never),
      (error: unknown) => error instanceof QueueBoxConfigError && error.option === option,
      option,
    );

  it('resolves each destination to tokens a second and a bucket size (burst defaults to limit, per to a second)', () => {
    assert.deepEqual(resolveOptions({ outbox: { publisher } }).outbox.rateLimits, {});
    const resolved = resolveOptions({
      outbox: { publisher, rateLimits: { partner: { limit: 30, per: '1m', burst: 5 }, fast: { limit: 8 } } },
    });
    assert.deepEqual(resolved.outbox.rateLimits, { partner: { perSecond: 0.5, burst: 5 }, fast: { perSecond: 8, burst: 8 } });
  });

  it('refuses a missing or bad limit, period or burst, and unknown keys, naming the option', () => {
    rejects({ partner: {} }, 'outbox.rateLimits.partner.limit');
    rejects({ partner: { limit: 0 } }, 'outbox.rateLimits.partner.limit');
    rejects({ partner: { limit: 1.5 } }, 'outbox.rateLimits.partner.limit');
    rejects({ partner: { limit: 1, per: 'soon' } }, 'outbox.rateLimits.partner.per');
    rejects({ partner: { limit: 1, burst: 0 } }, 'outbox.rateLimits.partner.burst');
    rejects({ partner: { limit: 1, rate: 2 } }, 'outbox.rateLimits.partner.rate');
    rejects({ partner: 5 }, 'outbox.rateLimits.partner');
  });
});
