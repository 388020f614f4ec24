import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SIGNATURE_HEADER, signatureHeaders, TIMESTAMP_HEADER, verifySignature } from '../../lib/inbox/receiver/signature';

const secret = 'unit-test-secret-0123456789';
const body = '{"a":1}';
const now = 1_800_000_000;

function check(overrides: Partial<Parameters<typeof verifySignature>[0]>) {
  const headers = signatureHeaders(secret, body, now);
  return verifySignature({
    secrets: [secret],
    timestamp: headers[TIMESTAMP_HEADER],
    signature: headers[SIGNATURE_HEADER],
    body,
    nowSeconds: now,
    toleranceSeconds: 300,
    ...overrides,
  });
}

describe('request signatures', () => {
  it('signs "<timestamp>.<body>" with HMAC-SHA256 as v1=<hex>', () => {
    const headers = signatureHeaders(secret, body, now);
    assert.equal(headers[TIMESTAMP_HEADER], String(now));
    assert.match(headers[SIGNATURE_HEADER], /^v1=[0-9a-f]{64}$/);
    assert.equal(check({}), 'valid');
  });

  it('accepts the timestamp within the tolerance on both sides and rejects it outside', () => {
    assert.equal(check({ nowSeconds: now + 300 }), 'valid');
    assert.equal(check({ nowSeconds: now - 300 }), 'valid');
    assert.equal(check({ nowSeconds: now + 301 }), 'stale');
  });

  it('rejects other bodies and secrets, and tells missing from malformed', () => {
    assert.equal(check({ body: '{"a":2}' }), 'mismatch');
    assert.equal(check({ secrets: ['another-secret-0123456789'] }), 'mismatch');
    assert.equal(check({ signature: undefined }), 'missing');
    assert.equal(check({ timestamp: 'yesterday' }), 'malformed');
    assert.equal(check({ signature: 'sha256=abc' }), 'malformed');
    assert.equal(check({ signature: 'v1=abcd' }), 'mismatch', 'a short signature is compared safely');
  });

  it('accepts any listed v1 signature and any configured secret (rotation)', () => {
    const valid = signatureHeaders(secret, body, now)[SIGNATURE_HEADER];
    assert.equal(check({ signature: `v1=${'0'.repeat(64)}, ${valid}` }), 'valid');
    assert.equal(check({ secrets: ['new-secret-0123456789', secret] }), 'valid');
  });
});
