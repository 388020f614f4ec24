import { createHmac, timingSafeEqual } from 'node:crypto';
import { WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER } from '../wire-headers';
import type { SignatureCheck } from './signature';

// Standard Webhooks (https://www.standardwebhooks.com, the spec's "Signature scheme"): the symmetric
// `v1` scheme. It signs `<webhook-id>.<webhook-timestamp>.<body>` with HMAC-SHA256 under a secret
// given as `whsec_<base64 key>`; the signature header holds `v1,<base64>` entries separated by
// spaces (several during a rotation). It covers the id, the timestamp and the body only: no path, no
// other header (QueueBox's own `v2` scheme signs those too, docs/inbox.md). The asymmetric `v1a`
// entries are not verified here (they do not match and are skipped).

const PREFIX = 'whsec_';
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
/** An HMAC-SHA256 key below 16 bytes is refused, as QueueBox's own scheme refuses a short secret. */
const MIN_KEY_BYTES = 16;

/** The key bytes of a Standard Webhooks secret (`whsec_<base64>`, the prefix optional), or undefined when it is not one. */
export function standardWebhookKey(secret: unknown): Buffer | undefined {
  if (typeof secret !== 'string') return undefined;
  const encoded = secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret;
  if (!BASE64.test(encoded) || encoded.length % 4 !== 0) return undefined;
  const key = Buffer.from(encoded, 'base64');
  return key.length >= MIN_KEY_BYTES ? key : undefined;
}

function signature(key: Buffer, id: string, timestamp: string, body: string | Buffer): string {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
}

/**
 * The Standard Webhooks headers that sign `body` as message `id` with `secret` (`whsec_...`).
 * `HttpPublisher` with `signatureScheme: 'standard-webhooks'` sends these, the message id as
 * `webhook-id`.
 *
 * @example
 * standardWebhookHeaders('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', body: '{"test": 2432232314}' }, 1614265330)
 * // { 'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek', 'webhook-timestamp': '1614265330', 'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=' }
 */
export function standardWebhookHeaders(
  secret: string,
  message: { id: string; body: string | Buffer },
  nowSeconds = Math.floor(Date.now() / 1000),
): Record<string, string> {
  const key = standardWebhookKey(secret);
  if (!key) throw new TypeError('a Standard Webhooks secret is "whsec_" followed by the base64 of at least 16 bytes');
  const timestamp = String(nowSeconds);
  return {
    [WEBHOOK_ID_HEADER]: message.id,
    [WEBHOOK_TIMESTAMP_HEADER]: timestamp,
    [WEBHOOK_SIGNATURE_HEADER]: `v1,${signature(key, message.id, timestamp, message.body)}`,
  };
}

/**
 * Checks a Standard Webhooks signature as the inbox receiver does: `webhook-id`, `webhook-timestamp`
 * and `webhook-signature` present, the timestamp within `toleranceSeconds` of now, and a `v1`
 * entry that matches one of `secrets` (compared in constant time). Never throws.
 */
export function verifyStandardWebhook(p: {
  /** `whsec_...` secrets; several during a rotation. */
  secrets: readonly string[];
  /** Request headers, names in any case. */
  headers: Record<string, string | string[] | undefined>;
  body: string | Buffer;
  nowSeconds: number;
  toleranceSeconds: number;
}): SignatureCheck {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(p.headers)) {
    if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(' ') : String(value);
  }
  const id = headers[WEBHOOK_ID_HEADER];
  const timestamp = headers[WEBHOOK_TIMESTAMP_HEADER];
  const signed = headers[WEBHOOK_SIGNATURE_HEADER];
  if (!id || !timestamp || !signed) return 'missing';
  if (!/^\d{1,12}$/.test(timestamp)) return 'malformed';
  if (Math.abs(p.nowSeconds - Number(timestamp)) > p.toleranceSeconds) return 'stale';
  const given = signed
    .split(' ')
    .filter((entry) => entry.startsWith('v1,'))
    .map((entry) => Buffer.from(entry.slice(3), 'base64'));
  if (given.length === 0) return 'malformed';
  for (const secret of p.secrets) {
    const key = standardWebhookKey(secret);
    if (!key) continue;
    const expected = Buffer.from(signature(key, id, timestamp, p.body), 'base64');
    if (given.some((mac) => mac.length === expected.length && timingSafeEqual(mac, expected))) return 'valid';
  }
  return 'mismatch';
}
