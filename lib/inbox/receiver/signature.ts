import { createHmac, timingSafeEqual } from 'node:crypto';

/** `X-QueueBox-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>` (several `v1=` entries may be comma-separated). */
export const SIGNATURE_HEADER = 'X-QueueBox-Signature';
/** `X-QueueBox-Timestamp: <unix seconds>`, signed with the body so a captured request cannot be replayed later. */
export const TIMESTAMP_HEADER = 'X-QueueBox-Timestamp';

export type SignatureCheck = 'valid' | 'missing' | 'malformed' | 'stale' | 'mismatch';

function hmac(secret: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

/**
 * The headers that sign `body` with `secret` at `nowSeconds`.
 *
 * @example
 * fetch(url, { method: 'POST', body, headers: { ...signatureHeaders(secret, body), 'content-type': 'application/json' } })
 */
export function signatureHeaders(
  secret: string,
  body: string | Buffer,
  nowSeconds = Math.floor(Date.now() / 1000),
): Record<string, string> {
  const timestamp = String(nowSeconds);
  return { [TIMESTAMP_HEADER]: timestamp, [SIGNATURE_HEADER]: `v1=${hmac(secret, timestamp, body).toString('hex')}` };
}

/**
 * Checks a signed request: the timestamp within `toleranceSeconds` of now, and a `v1` signature
 * that matches one of `secrets` (several during a rotation), compared in constant time.
 */
export function verifySignature(p: {
  secrets: readonly string[];
  timestamp: string | undefined;
  signature: string | undefined;
  body: string | Buffer;
  nowSeconds: number;
  toleranceSeconds: number;
}): SignatureCheck {
  if (!p.timestamp || !p.signature) return 'missing';
  if (!/^\d{1,12}$/.test(p.timestamp)) return 'malformed';
  if (Math.abs(p.nowSeconds - Number(p.timestamp)) > p.toleranceSeconds) return 'stale';
  const given = p.signature
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part.startsWith('v1='))
    .map((part) => Buffer.from(part.slice(3), 'hex'));
  if (given.length === 0) return 'malformed';
  for (const secret of p.secrets) {
    const expected = hmac(secret, p.timestamp, p.body);
    if (given.some((candidate) => candidate.length === expected.length && timingSafeEqual(candidate, expected))) return 'valid';
  }
  return 'mismatch';
}
