import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseDuration } from '../../lib/common/duration';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { resolveOptions, resolvePullHandler } from '../../lib/options/options.resolver';
import type { OutboundMessage } from '../../lib/types/messages';
import type { Publisher } from '../../lib/types/outbox';

const publisher = { publish: async () => undefined };

function rejects(options: unknown, option: string, fragment: string) {
  assert.throws(
    () => resolveOptions(options as never),
    (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, `expected QueueBoxConfigError, got ${String(error)}`);
      assert.equal(error.option, option);
      assert.ok(error.message.includes(fragment), `${error.message} should include ${fragment}`);
      return true;
    },
  );
}

describe('durations', () => {
  const range = { min: 0, max: 30 * 24 * 3600_000 };
  it('accepts milliseconds and strings with a unit', () => {
    const cases: [unknown, number][] = [
      [0, 0],
      [1500, 1500],
      ['250ms', 250],
      ['30s', 30_000],
      ['1.5s', 1500],
      ['5m', 300_000],
      ['1h', 3_600_000],
      ['2d', 172_800_000],
      [' 10 s ', 10_000],
    ];
    for (const [value, ms] of cases) assert.equal(parseDuration('x', value, range), ms, String(value));
  });

  it('rejects anything else with a QueueBoxConfigError naming the option and the accepted forms', () => {
    for (const bad of ['30', '30 sec', '1w', '-5s', 's', '', '1e3ms', 1.5, -1, Number.NaN, null, {}, true]) {
      assert.throws(
        () => parseDuration('outbox.publishTimeout', bad, range),
        (error: unknown) =>
          error instanceof QueueBoxConfigError &&
          error.option === 'outbox.publishTimeout' &&
          (/must be a duration: whole milliseconds \(30000\) or a number with a unit/.test(error.message) ||
            /from 0 ms to/.test(error.message)),
        `bad value ${String(bad)}`,
      );
    }
    assert.throws(() => parseDuration('d', '2h', { min: 0, max: 3600_000 }), /from 0 ms to 3600000 ms, got "2h"/);
  });
});

describe('retry policy options', () => {
  const message = { destination: 'billing' } as OutboundMessage;

  it('keeps maxAttempts and backoff as before when retry is not set', () => {
    const { outbox } = resolveOptions({ outbox: { publisher, maxAttempts: 4, backoff: { initialMs: 10, jitter: false } } });
    assert.equal(outbox.maxAttempts, 4);
    assert.equal(outbox.backoff(3, null, message), 40);
    assert.equal(outbox.retryIf(new Error('x'), 1, message), true);
  });

  it('retry: false is one attempt, a number is the attempts in all', () => {
    assert.equal(resolveOptions({ outbox: { publisher, retry: false } }).outbox.maxAttempts, 1);
    assert.equal(resolveOptions({ outbox: { publisher, retry: 5 } }).outbox.maxAttempts, 5);
    assert.equal(resolveOptions({ outbox: { publisher } }).outbox.maxAttempts, 10);
  });

  it('retry object: attempts, backoff with durations, retryIf; relay and pull share it', () => {
    const retryIf = (error: unknown) => !(error instanceof TypeError);
    const { outbox, inbox, pull } = resolveOptions({
      outbox: { publisher, retry: { attempts: 7, backoff: { delay: '2s', factor: 3, maxDelay: '1m', jitter: false }, retryIf } },
      inbox: { relay: { retry: { attempts: 2, backoff: { delay: 100, jitter: false } } } },
      pull: { retry: 3 },
    });
    assert.equal(outbox.maxAttempts, 7);
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((attempt) => outbox.backoff(attempt, null, message)),
      [2000, 6000, 18_000, 54_000, 60_000],
    );
    assert.equal(outbox.retryIf, retryIf);
    assert.equal(inbox.relay.maxAttempts, 2);
    assert.equal(inbox.relay.backoff(2, null, {}), 200);
    assert.equal(pull.maxAttempts, 3);
  });

  it('a backoff function receives (attempt, error, message)', () => {
    const seen: unknown[] = [];
    const { outbox } = resolveOptions({
      outbox: {
        publisher,
        retry: {
          backoff: (attempt, error, m) => {
            seen.push(attempt, error, m);
            return 42;
          },
        },
      },
    });
    const error = new Error('boom');
    assert.equal(outbox.backoff(3, error, message), 42);
    assert.deepEqual(seen, [3, error, message]);
  });

  it('a @PullHandler retry replaces the pull defaults', () => {
    const defaults = resolveOptions({ workers: false, pull: { retry: { attempts: 4 } } }).pull;
    assert.equal(resolvePullHandler('h', {}, defaults).maxAttempts, 4);
    assert.equal(resolvePullHandler('h', { retry: false }, defaults).maxAttempts, 1);
    assert.equal(resolvePullHandler('h', { maxAttempts: 6 }, defaults).maxAttempts, 6);
  });

  it('names bad retry options, with a "did you mean" for misspelled keys', () => {
    rejects({ outbox: { publisher, retry: 0 } }, 'outbox.retry', 'from 1 to');
    rejects({ outbox: { publisher, retry: true } }, 'outbox.retry', 'must be false (no retry), a number of attempts');
    rejects({ outbox: { publisher, retry: { attempt: 3 } } }, 'outbox.retry.attempt', 'Did you mean "outbox.retry.attempts"?');
    rejects({ outbox: { publisher, retry: { tries: 3 } } }, 'outbox.retry.tries', 'Unknown QueueBox option "outbox.retry.tries". See');
    rejects({ outbox: { publisher, retry: { retryif: () => true } } }, 'outbox.retry.retryif', 'Did you mean "outbox.retry.retryIf"?');
    rejects(
      { outbox: { publisher, retry: { backoff: { maxdelay: '1s' } } } },
      'outbox.retry.backoff.maxdelay',
      'Did you mean "outbox.retry.backoff.maxDelay"?',
    );
    rejects({ outbox: { publisher, retry: { backoff: { delay: '10x' } } } }, 'outbox.retry.backoff.delay', 'must be a duration');
    rejects(
      { outbox: { publisher, retry: { backoff: { delay: '1m', maxDelay: '30s' } } } },
      'outbox.retry.backoff.maxDelay',
      'must not be below',
    );
    rejects({ outbox: { publisher, retry: { backoff: { factor: 0 } } } }, 'outbox.retry.backoff.factor', 'from 1 to 100');
    rejects({ outbox: { publisher, retry: { retryIf: 'yes' } } }, 'outbox.retry.retryIf', 'must be a function');
    rejects({ outbox: { publisher, retry: 3, maxAttempts: 3 } }, 'outbox.maxAttempts', 'not both');
    rejects({ inbox: { relay: { retry: 3, backoff: {} } }, workers: false }, 'inbox.relay.backoff', 'not both');
    rejects({ workers: false, pull: { retry: '3' } }, 'pull.retry', 'must be false');
  });
});

describe('publishTimeout', () => {
  it('defaults to a third of the lease and takes durations', () => {
    assert.equal(resolveOptions({ outbox: { publisher } }).outbox.publishTimeoutMs, 100_000);
    assert.equal(resolveOptions({ outbox: { publisher, claimTimeoutMs: 3000 } }).outbox.publishTimeoutMs, 1000);
    assert.equal(resolveOptions({ outbox: { publisher, publishTimeout: '30s' } }).outbox.publishTimeoutMs, 30_000);
  });

  it('must be below claimTimeoutMs', () => {
    rejects({ outbox: { publisher, publishTimeout: '5m' } }, 'outbox.publishTimeout', 'must be below "outbox.claimTimeoutMs" (300000 ms)');
    rejects({ outbox: { publisher, claimTimeoutMs: 1000, publishTimeout: 1000 } }, 'outbox.publishTimeout', 'must be below');
    rejects({ outbox: { publisher, publishTimeout: '1 minute' } }, 'outbox.publishTimeout', 'must be a duration');
    rejects({ outbox: { publisher, publishTimout: '1s' } }, 'outbox.publishTimout', 'Did you mean "outbox.publishTimeout"?');
  });
});

describe('publishers option', () => {
  class ClassPublisher implements Publisher {
    async publish() {}
  }

  it('keeps instances and classes apart; the default route knows both', () => {
    const { outbox } = resolveOptions({ outbox: { publishers: { a: publisher, b: ClassPublisher } } });
    assert.deepEqual(Object.keys(outbox.publishers), ['a']);
    assert.deepEqual(Object.keys(outbox.publisherTypes), ['b']);
    assert.equal(outbox.route({ destination: 'b' } as OutboundMessage), 'b');
    const single = resolveOptions({ outbox: { publisher: ClassPublisher } }).outbox;
    assert.equal(single.route({ destination: 'anything' } as OutboundMessage), 'default');
    assert.equal(single.publisherTypes.default, ClassPublisher);
  });

  it('rejects what is neither', () => {
    rejects({ outbox: { publishers: { a: () => undefined } } }, 'outbox.publishers.a', 'or a class with one');
    rejects({ outbox: { publishers: { a: class {} } } }, 'outbox.publishers.a', 'must be a Publisher');
    rejects({ outbox: { publishers: 'http' } }, 'outbox.publishers', 'must be an object');
  });
});

describe('optional peers', () => {
  it('loading the package does not load @nestjs/microservices or a broker client', () => {
    // A fresh process, so nothing else loaded them first; the compiled lib is what users require.
    const index = join(__dirname, '..', '..', 'lib', 'index.js');
    const script = `require(${JSON.stringify(index)}); console.log(JSON.stringify(Object.keys(require.cache).filter((k) => /@nestjs[\\\\/]microservices|amqplib|amqp-connection-manager|@nats-io|mqtt|kafkajs|ioredis/.test(k))))`;
    const loaded = JSON.parse(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim().split('\n').at(-1) as string);
    assert.deepEqual(loaded, []);
    // And the check can see them when they are loaded.
    const control = script.replace('require(', "require('@nestjs/microservices'); require(");
    assert.ok(
      JSON.parse(execFileSync(process.execPath, ['-e', control], { encoding: 'utf8' }).trim().split('\n').at(-1) as string).length > 0,
    );
  });
});
