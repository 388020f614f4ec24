import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { describe, it } from 'node:test';
import { canonicalSigningString, signatureHeaders, signRequest, verifyRequestSignature, verifySignature } from '../../lib/common/signature';
import { SIGNATURE_HEADER, SIGNED_HEADERS_HEADER, TIMESTAMP_HEADER } from '../../lib/wire-headers';

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
    assert.equal(check({ signature: 'v1=abcd' }), 'malformed', 'a short signature is refused before any comparison');
  });

  it('accepts any listed v1 signature and any configured secret (rotation)', () => {
    const valid = signatureHeaders(secret, body, now)[SIGNATURE_HEADER];
    assert.equal(check({ signature: `v1=${'0'.repeat(64)}, ${valid}` }), 'valid');
    assert.equal(check({ secrets: ['new-secret-0123456789', secret] }), 'valid');
  });

  it('v2 signs the documented canonical string (what a sender in another language reproduces)', () => {
    const request = { path: '/queuebox/inbox/orders', headers: { 'Idempotency-Key': 'evt-1', 'X-QueueBox-Key': ' order-7 ' }, body };
    const headers = signRequest(secret, request, now);
    assert.equal(headers[SIGNED_HEADERS_HEADER], 'idempotency-key,x-queuebox-key');
    assert.equal(headers[TIMESTAMP_HEADER], String(now));
    const canonical = `v2\n${now}\nPOST\n/queuebox/inbox/orders\nidempotency-key:evt-1\nx-queuebox-key:order-7\n\n${body}`;
    assert.equal(canonicalSigningString(String(now), request, ['idempotency-key', 'x-queuebox-key']).toString('utf8'), canonical);
    assert.equal(headers[SIGNATURE_HEADER], `v2=${createHmac('sha256', secret).update(canonical).digest('hex')}`);
  });

  it('v2 verification: required headers must be signed, v1 only when accepted', () => {
    const signedHeaders = { 'idempotency-key': 'evt-1' };
    const request = { path: '/queuebox/inbox/orders', headers: signedHeaders, body };
    const verify = (headers: Record<string, string>, extra: Partial<Parameters<typeof verifyRequestSignature>[0]> = {}) =>
      verifyRequestSignature({
        secrets: [secret],
        method: 'POST',
        path: '/queuebox/inbox/orders',
        headers,
        body,
        requiredHeaders: ['idempotency-key', 'x-tenant'],
        nowSeconds: now,
        toleranceSeconds: 300,
        ...extra,
      });
    const v2 = { ...signedHeaders, ...signRequest(secret, request, now) };
    assert.equal(verify(v2), 'valid');
    assert.equal(verify(v2, { path: '/queuebox/inbox/payments' }), 'mismatch');
    assert.equal(verify(v2, { method: 'PUT' }), 'mismatch');
    assert.equal(verify({ ...v2, 'x-tenant': 'acme' }), 'unsigned-header');
    const v1 = { ...signedHeaders, ...signatureHeaders(secret, body, now) };
    assert.equal(verify(v1), 'v1-refused');
    assert.equal(verify(v1, { acceptV1: true }), 'valid');
    assert.equal(verify({ ...v2, [SIGNATURE_HEADER]: 'v2=xyz' }), 'malformed');
    assert.equal(verify({ ...v2, [SIGNATURE_HEADER]: `v3=${'a'.repeat(64)}` }), 'malformed', 'no entry of a version the receiver knows');
  });
});
