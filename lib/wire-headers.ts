/**
 * Every header name QueueBox reads or writes on the wire, in one place. Names are written in their
 * canonical case; compare case-insensitively (HTTP lowercases them) with `.toLowerCase()`.
 */

/** The outbox message id, sent with every published message; the receiver takes it as the idempotency key when `Idempotency-Key` is absent. */
export const MESSAGE_ID_HEADER = 'X-Message-Id';
/** The idempotency key an HTTP sender gives the inbox receiver. */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
/**
 * The outbox key (the ordering key) sent by the HTTP and client-proxy publishers; the receiver's
 * default aggregate header. Its value is in the wire form of `encodeHeaderValue` (as it is when
 * visible ASCII, else RFC 8187 `UTF-8''…`), which the receiver decodes.
 */
export const KEY_HEADER = 'X-QueueBox-Key';
/** Set by the inbox relay on the message it forwards: the idempotency key of the inbox message that caused it (`encodeHeaderValue` form). */
export const CAUSATION_HEADER = 'X-Causation-Id';

/**
 * `X-QueueBox-Signature: v2=<hex HMAC-SHA256(secret, canonical string)>` (several entries may be
 * comma-separated: one per secret during a rotation, or `v1=` beside `v2=` while receivers upgrade).
 */
export const SIGNATURE_HEADER = 'X-QueueBox-Signature';
/** `X-QueueBox-Timestamp: <unix seconds>`, signed, so a captured request is refused outside the receiver's window. */
export const TIMESTAMP_HEADER = 'X-QueueBox-Timestamp';
/** `X-QueueBox-Signed-Headers: idempotency-key,x-message-id,...`: the headers a `v2` signature covers, lower case, in signing order. */
export const SIGNED_HEADERS_HEADER = 'X-QueueBox-Signed-Headers';

/** W3C trace context, carried from the write to the publish or handler. */
export const TRACEPARENT_HEADER = 'traceparent';
export const TRACESTATE_HEADER = 'tracestate';

/** Written by a dead-letter replay: how many times the row was replayed, and when last (UTC, ISO 8601). */
export const REPLAY_COUNT_HEADER = 'X-QueueBox-Replay-Count';
export const REPLAYED_AT_HEADER = 'X-QueueBox-Replayed-At';

/**
 * Standard Webhooks (https://www.standardwebhooks.com): `webhook-id` (the message's unique id, what
 * the receiver deduplicates on), `webhook-timestamp` (unix seconds) and `webhook-signature`
 * (`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, space-separated entries).
 */
export const WEBHOOK_ID_HEADER = 'webhook-id';
export const WEBHOOK_TIMESTAMP_HEADER = 'webhook-timestamp';
export const WEBHOOK_SIGNATURE_HEADER = 'webhook-signature';
