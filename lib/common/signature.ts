import { createHmac, timingSafeEqual } from 'node:crypto';

import { SIGNATURE_HEADER, SIGNED_HEADERS_HEADER, TIMESTAMP_HEADER } from '../wire-headers';

/**
 * Outcome of a signature check. `unsigned-header`: a header the receiver stores or uses (idempotency
 * key, aggregate key, any `X-` header) is not in `X-QueueBox-Signed-Headers`. `v1-refused`: only `v1`
 * signatures, and the receiver does not accept them (`receiver.acceptV1Signatures`).
 */
export type SignatureCheck = 'valid' | 'missing' | 'malformed' | 'stale' | 'mismatch' | 'unsigned-header' | 'v1-refused';

/** What a `v2` signature covers besides the timestamp. */
export interface SignedRequest {
  /** HTTP method. Default `POST`. */
  method?: string;
  /** The request path as sent, percent-encoded, without the query string (e.g. `/queuebox/inbox/orders`). */
  path: string;
  /** Header values by name (any case). Which of them are signed: `signedHeaders`. */
  headers: Record<string, string>;
  body: string | Buffer;
}

const HEADER_NAME = /^[a-z0-9!#$%&'*+.^_`|~-]+$/;
const ENTRY = /^v(\d+)=([0-9a-f]{64})$/i;

/**
 * The string a `v2` signature is the HMAC-SHA256 of (UTF-8, lines separated by `\n`):
 *
 * ```
 * v2
 * <timestamp>
 * <METHOD, upper case>
 * <path>
 * <name>:<value>      one line per signed header, names lower case, values trimmed, in the order of X-QueueBox-Signed-Headers
 *                     an empty line
 * <body, byte for byte>
 * ```
 *
 * @example
 * canonicalSigningString('1700000000', { path: '/queuebox/inbox/orders', headers: { 'Idempotency-Key': 'evt-1' }, body: '{}' }, ['idempotency-key'])
 * // 'v2\n1700000000\nPOST\n/queuebox/inbox/orders\nidempotency-key:evt-1\n\n{}'
 */
export function canonicalSigningString(timestamp: string, request: SignedRequest, signedHeaders: readonly string[]): Buffer {
  const values = lowerCaseKeys(request.headers);
  const lines = [
    'v2',
    timestamp,
    (request.method ?? 'POST').toUpperCase(),
    request.path,
    ...signedHeaders.map((name) => `${name}:${(values[name] ?? '').trim()}`),
    '',
    '',
  ];
  const body = typeof request.body === 'string' ? Buffer.from(request.body, 'utf8') : request.body;
  return Buffer.concat([Buffer.from(lines.join('\n'), 'utf8'), body]);
}

/**
 * The headers that sign a request with `secret` (scheme `v2`): `X-QueueBox-Timestamp`,
 * `X-QueueBox-Signed-Headers` and `X-QueueBox-Signature`. Every header in `request.headers` is
 * signed (send exactly these, plus `content-type`); sign the idempotency key, the aggregate key
 * and every `X-` header, or the receiver answers 401. `HttpPublisher` with a `secret` does this.
 *
 * @example
 * const headers = { 'Idempotency-Key': 'evt-1', 'X-QueueBox-Key': 'order-7' };
 * const body = JSON.stringify(payload);
 * await fetch(`${base}/queuebox/inbox/orders`, {
 *   method: 'POST', body,
 *   headers: { ...headers, ...signRequest(secret, { path: '/queuebox/inbox/orders', headers, body }), 'content-type': 'application/json' },
 * });
 */
export function signRequest(secret: string, request: SignedRequest, nowSeconds = Math.floor(Date.now() / 1000)): Record<string, string> {
  const timestamp = String(nowSeconds);
  const own = new Set([SIGNATURE_HEADER, TIMESTAMP_HEADER, SIGNED_HEADERS_HEADER].map((name) => name.toLowerCase()));
  const signed = Object.keys(lowerCaseKeys(request.headers)).filter((name) => !own.has(name));
  const mac = createHmac('sha256', secret)
    .update(canonicalSigningString(timestamp, request, signed))
    .digest('hex');
  return { [TIMESTAMP_HEADER]: timestamp, [SIGNED_HEADERS_HEADER]: signed.join(','), [SIGNATURE_HEADER]: `v2=${mac}` };
}

function v1Hmac(secret: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

/**
 * The legacy `v1` headers: HMAC-SHA256 of `"<timestamp>.<body>"` only. A `v1` signature does not
 * cover the path, the idempotency key or any header, so a captured request can be replayed with
 * those changed: receivers refuse it unless `receiver.acceptV1Signatures` is on. Use `signRequest`.
 *
 * @deprecated Sign with `signRequest` (`v2`).
 */
export function signatureHeaders(
  secret: string,
  body: string | Buffer,
  nowSeconds = Math.floor(Date.now() / 1000),
): Record<string, string> {
  const timestamp = String(nowSeconds);
  return { [TIMESTAMP_HEADER]: timestamp, [SIGNATURE_HEADER]: `v1=${v1Hmac(secret, timestamp, body).toString('hex')}` };
}

/** Parses `X-QueueBox-Signature`: undefined when any entry is not `v<n>=<64 hex digits>`. */
function parseSignature(value: string): { version: number; mac: Buffer }[] | undefined {
  const entries = value.split(',').map((part) => part.trim());
  const parsed: { version: number; mac: Buffer }[] = [];
  for (const entry of entries) {
    const match = ENTRY.exec(entry);
    if (!match) return undefined;
    parsed.push({ version: Number(match[1]), mac: Buffer.from(match[2], 'hex') });
  }
  return parsed;
}

/** Parses `X-QueueBox-Signed-Headers`: undefined when a name is invalid, repeated or the signature itself. */
function parseSignedHeaders(value: string | undefined): string[] | undefined {
  if (value === undefined || value.trim() === '') return [];
  const names = value.split(',').map((part) => part.trim().toLowerCase());
  const seen = new Set<string>();
  for (const name of names) {
    if (!HEADER_NAME.test(name) || seen.has(name) || name === SIGNATURE_HEADER.toLowerCase()) return undefined;
    seen.add(name);
  }
  return names;
}

/**
 * Checks a signed request, as the inbox receiver does: the timestamp within `toleranceSeconds` of
 * now; every header in `requiredHeaders` that the request carries listed in
 * `X-QueueBox-Signed-Headers`; and a `v2` signature over the canonical string
 * (`canonicalSigningString`) that matches one of `secrets` (several during a rotation), compared in
 * constant time. A `v1` signature counts only with `acceptV1`. Malformed values answer `malformed`,
 * never throw.
 */
export function verifyRequestSignature(p: {
  secrets: readonly string[];
  method: string;
  path: string;
  /** Request headers, names in any case (Node gives lower case). */
  headers: Record<string, string | string[] | undefined>;
  body: string | Buffer;
  /** Headers that must be signed when present (lower case). */
  requiredHeaders?: readonly string[];
  nowSeconds: number;
  toleranceSeconds: number;
  acceptV1?: boolean;
}): SignatureCheck {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(p.headers)) {
    if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  const timestamp = headers[TIMESTAMP_HEADER.toLowerCase()];
  const signature = headers[SIGNATURE_HEADER.toLowerCase()];
  if (!timestamp || !signature) return 'missing';
  if (!/^\d{1,12}$/.test(timestamp)) return 'malformed';
  const entries = parseSignature(signature);
  if (!entries) return 'malformed';
  if (Math.abs(p.nowSeconds - Number(timestamp)) > p.toleranceSeconds) return 'stale';
  const v2 = entries.filter((entry) => entry.version === 2).map((entry) => entry.mac);
  const v1 = entries.filter((entry) => entry.version === 1).map((entry) => entry.mac);
  const matches = (expected: Buffer, given: Buffer[]) => given.some((mac) => timingSafeEqual(mac, expected));
  if (v2.length > 0) {
    const signed = parseSignedHeaders(headers[SIGNED_HEADERS_HEADER.toLowerCase()]);
    if (!signed) return 'malformed';
    if (signed.some((name) => headers[name] === undefined)) return 'malformed';
    if ((p.requiredHeaders ?? []).some((name) => headers[name] !== undefined && !signed.includes(name))) return 'unsigned-header';
    const canonical = canonicalSigningString(timestamp, { method: p.method, path: p.path, headers, body: p.body }, signed);
    for (const secret of p.secrets) {
      if (matches(createHmac('sha256', secret).update(canonical).digest(), v2)) return 'valid';
    }
  }
  if (v1.length > 0 && p.acceptV1) {
    for (const secret of p.secrets) if (matches(v1Hmac(secret, timestamp, p.body), v1)) return 'valid';
  }
  if (v2.length === 0 && v1.length > 0 && !p.acceptV1) return 'v1-refused';
  return v2.length > 0 || v1.length > 0 ? 'mismatch' : 'malformed';
}

/**
 * Checks a legacy `v1` signature (timestamp and body only).
 *
 * @deprecated Use `verifyRequestSignature` (`v2`, which also covers method, path and headers).
 */
export function verifySignature(p: {
  secrets: readonly string[];
  timestamp: string | undefined;
  signature: string | undefined;
  body: string | Buffer;
  nowSeconds: number;
  toleranceSeconds: number;
}): SignatureCheck {
  const headers: Record<string, string | undefined> = {
    [TIMESTAMP_HEADER.toLowerCase()]: p.timestamp,
    [SIGNATURE_HEADER.toLowerCase()]: p.signature,
  };
  const check = verifyRequestSignature({ ...p, method: 'POST', path: '', headers, acceptV1: true });
  return check;
}

function lowerCaseKeys(headers: Record<string, string>): Record<string, string> {
  const lower: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) lower[name.toLowerCase()] = value;
  return lower;
}
