import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { backoffFunction } from '../../lib/common/backoff';
import { describeError } from '../../lib/common/errors';

describe('backoff', () => {
  it('grows exponentially up to the maximum', () => {
    const delay = backoffFunction({ initialMs: 100, factor: 2, maxMs: 1000, jitter: false });
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6].map((attempt) => delay(attempt, null, undefined)),
      [100, 200, 400, 800, 1000, 1000],
    );
  });

  it('spreads delays over the upper half with jitter', () => {
    const low = backoffFunction({ initialMs: 1000, factor: 2, maxMs: 60_000, jitter: true }, () => 0);
    const high = backoffFunction({ initialMs: 1000, factor: 2, maxMs: 60_000, jitter: true }, () => 1);
    assert.equal(low(3, null, undefined), 2000);
    assert.equal(high(3, null, undefined), 4000);
  });
});

describe('describeError', () => {
  it('keeps name and message, never the SQL parameters of a query error', () => {
    const error = Object.assign(new Error('duplicate key value violates unique constraint'), {
      name: 'QueryFailedError',
      code: '23505',
      parameters: ['secret-token', '{"card":"4111"}'],
      query: 'INSERT ...',
    });
    const text = describeError(error);
    assert.equal(text, 'QueryFailedError [23505]: duplicate key value violates unique constraint');
    assert.ok(!text.includes('secret-token'));
  });

  it('bounds the length', () => {
    assert.equal(describeError(new Error('x'.repeat(5000))).length, 2000);
  });
});
