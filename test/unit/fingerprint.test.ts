import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeError } from '../../lib/common/errors';
import { deadLetterFingerprint, errorClassOf, normalizeErrorMessage, RECLAIM_FINGERPRINT } from '../../lib/common/fingerprint';
import { PermanentPublishError, PublishError } from '../../lib/errors/queuebox.errors';

describe('dead-letter fingerprints', () => {
  it('normalizes UUIDs, long hex runs and numbers, in that order, and collapses whitespace', () => {
    const cases: [string, string][] = [
      ['HTTP 503 from https://api.example/orders/123 after 2.5 s', 'HTTP # from https://api.example/orders/# after # s'],
      ['order 6d83710c-876e-49f4-ae45-d5e1af395b8e not found', 'order <uuid> not found'],
      ['object 507f1f77bcf86cd799439011 missing (sha 0x1f2e3d4c5b6a)', 'object <hex> missing (sha <hex>)'],
      ['deadbeef and cafebabe are words here, 12345678 a number', 'deadbeef and cafebabe are words here, # a number'],
      [
        'duplicate key value violates unique constraint "orders_pkey"\n  Key (id)=(42)',
        'duplicate key value violates unique constraint "orders_pkey" Key (id)=(#)',
      ],
      ['at 2026-12-05T21:14:42.123Z', 'at #-#-#T#:#:#Z'],
      ['customer C-77 is blocked', 'customer C-# is blocked'],
    ];
    for (const [message, normalized] of cases) assert.equal(normalizeErrorMessage(message), normalized, message);
    assert.equal(normalizeErrorMessage('x'.repeat(500)).length, 300, 'cut to 300 characters');
  });

  it('names the error class: name, then /status (HTTP) or /code; typeof for a thrown value that is not an Error', () => {
    assert.equal(errorClassOf(new PublishError('HTTP 503', 503)), 'PublishError/503');
    assert.equal(errorClassOf(new PublishError('no status')), 'PublishError/QUEUEBOX_PUBLISH');
    assert.equal(errorClassOf(new PermanentPublishError('HTTP 400')), 'PermanentPublishError/QUEUEBOX_PERMANENT_PUBLISH');
    assert.equal(
      errorClassOf(Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' })),
      'Error/ECONNREFUSED',
    );
    assert.equal(errorClassOf(new TypeError('x')), 'TypeError');
    assert.equal(errorClassOf('a string'), 'string');
    assert.equal(errorClassOf(null), 'null');
    const odd = new Error('x');
    odd.name = 'Odd: Name';
    assert.equal(errorClassOf(odd), 'Odd:Name', 'never the separator ": "');
    const hostile = new Proxy(new Error('x'), {
      get() {
        throw new Error('no');
      },
    });
    assert.equal(errorClassOf(hostile), 'unknown', 'never throws');
  });

  it("is '<class>: <normalized message>', the message without describeError's name prefix; one per cause whatever the ids", () => {
    const a = new PublishError('HTTP 503 from partner for order 1001', 503);
    const b = new PublishError('HTTP 503 from partner for order 77', 503);
    assert.equal(deadLetterFingerprint(errorClassOf(a), describeError(a)), 'PublishError/503: HTTP # from partner for order #');
    assert.equal(deadLetterFingerprint(errorClassOf(a), describeError(a)), deadLetterFingerprint(errorClassOf(b), describeError(b)));
    const c = new PublishError('HTTP 500 from partner for order 77', 500);
    assert.notEqual(deadLetterFingerprint(errorClassOf(a), describeError(a)), deadLetterFingerprint(errorClassOf(c), describeError(c)));
    assert.equal(deadLetterFingerprint('string', 'plain text 12'), 'string: plain text #');
    assert.equal(
      RECLAIM_FINGERPRINT,
      deadLetterFingerprint('LeaseExpired', 'lease expired on attempt 10 of 10: the worker crashed, was stopped or outlived its lease'),
      "the reclaim statements' literal is what the rule makes of their last_error",
    );
  });
});
