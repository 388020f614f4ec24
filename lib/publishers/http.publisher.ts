import { describeError } from '../common/errors';
import { encodeHeaderValue } from '../common/header-value';
import { packageVersion } from '../common/package-version';
import { signRequest } from '../common/signature';
import { standardWebhookHeaders, standardWebhookKey } from '../common/standard-webhooks';
import { PermanentPublishError, PublishError, QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';
import { KEY_HEADER } from '../wire-headers';

export interface HttpPublisherOptions {
  /** The URL for each destination: a map, or a function returning a URL (or undefined for none). */
  destinations: Record<string, string> | ((destination: string) => string | undefined);
  /** Time allowed for one request, answer included. Default 10000 ms. A timeout is retried. */
  timeoutMs?: number;
  /** Headers added to every request (message headers win on a clash). */
  headers?: Record<string, string>;
  /**
   * Signs every request with HMAC-SHA256, scheme `v2` (`signRequest`): timestamp, method, URL
   * path, every header sent (message id, key, the message's own headers) and the body, as
   * QueueBox's inbox receiver verifies (docs/inbox.md, "Signing requests"). Default: unsigned.
   */
  secret?: string;
  /**
   * How `secret` signs: `'queuebox'` (the default: QueueBox's `v2` scheme above, which QueueBox's
   * receiver verifies with `receiver.secret`), or `'standard-webhooks'`: the Standard Webhooks
   * headers `webhook-id` (the message id), `webhook-timestamp` and `webhook-signature`
   * (`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`), with `secret` a `whsec_<base64>`
   * secret, for receivers built on a Standard Webhooks library (QueueBox's receiver verifies them
   * with `receiver.standardWebhooksSecret`). It covers the id, the timestamp and the body only.
   */
  signatureScheme?: 'queuebox' | 'standard-webhooks';
  /**
   * The longest wait a `Retry-After` answer (on 429 or 503: seconds, or an HTTP date) sets before
   * the next attempt; a longer one is cut to this. Default 3600000 (one hour). 0 ignores
   * `Retry-After` (the retry policy's backoff decides, as for any failure).
   */
  maxRetryAfterMs?: number;
}

// 4xx answers that a later attempt may turn into a success.
const RETRYABLE_4XX = new Set([408, 425, 429]);
// The answers whose Retry-After says when to come back (RFC 9110 15.5.20 / 15.6.4, RFC 6585 4).
const TOLD_TO_WAIT = new Set([429, 503]);
const DEFAULT_MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Delivers each message as `POST <url>` with the JSON payload as body, `X-Message-Id`, the
 * message headers and `X-QueueBox-Key` (when the message has a key: as it is when it is visible
 * ASCII, else RFC 8187 `UTF-8''<percent-encoded>`, see `encodeHeaderValue`), signed when `secret` is set. 2xx is success; 4xx other than 408, 425 and 429 is permanent (dead-letter);
 * anything else, a network error or a timeout included, is retried. A 429 or 503 with
 * `Retry-After` is retried when it says (at most `maxRetryAfterMs` later), and the row's
 * `last_error` says it was told to wait.
 *
 * @example
 * new HttpPublisher({ destinations: { billing: 'http://billing.internal/events' }, timeoutMs: 5000 })
 */
export class HttpPublisher implements Publisher {
  private readonly timeoutMs: number;
  private readonly maxRetryAfterMs: number;

  constructor(private readonly options: HttpPublisherOptions) {
    const { destinations } = options ?? {};
    if (typeof destinations === 'object' && destinations !== null) {
      for (const [destination, url] of Object.entries(destinations)) {
        if (!isHttpUrl(url)) throw new QueueBoxConfigError(`destinations.${destination}`, messages.httpUrlInvalid(destination, url));
      }
    } else if (typeof destinations !== 'function') {
      throw new QueueBoxConfigError('destinations', messages.httpDestinationsInvalid());
    }
    const timeoutMs = options.timeoutMs ?? 10_000;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
      throw new QueueBoxConfigError('timeoutMs', messages.optionOutOfRange('timeoutMs', timeoutMs, 1, Number.MAX_SAFE_INTEGER));
    }
    this.timeoutMs = timeoutMs;
    const maxRetryAfterMs = options.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
    if (!Number.isInteger(maxRetryAfterMs) || maxRetryAfterMs < 0 || maxRetryAfterMs > 30 * 86_400_000) {
      throw new QueueBoxConfigError('maxRetryAfterMs', messages.optionOutOfRange('maxRetryAfterMs', maxRetryAfterMs, 0, 30 * 86_400_000));
    }
    this.maxRetryAfterMs = maxRetryAfterMs;
    const scheme = options.signatureScheme ?? 'queuebox';
    if (scheme !== 'queuebox' && scheme !== 'standard-webhooks') {
      throw new QueueBoxConfigError('signatureScheme', messages.signatureSchemeInvalid(scheme));
    }
    if (options.signatureScheme !== undefined && options.secret === undefined) {
      throw new QueueBoxConfigError('secret', messages.signatureSchemeNeedsSecret());
    }
    if (scheme === 'standard-webhooks' && !standardWebhookKey(options.secret)) {
      throw new QueueBoxConfigError('secret', messages.standardWebhookSecretInvalid('secret'));
    }
    if (options.secret !== undefined && (typeof options.secret !== 'string' || options.secret.length < 16)) {
      throw new QueueBoxConfigError('secret', messages.secretTooShort('secret'));
    }
  }

  /** The destinations of a `destinations` object (none for a function): the metrics show each from start-up. */
  destinations(): string[] {
    const { destinations } = this.options;
    return typeof destinations === 'function' ? [] : Object.keys(destinations);
  }

  async publish(message: OutboundMessage, signal: AbortSignal): Promise<void> {
    const url = this.urlOf(message.destination);
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const body = JSON.stringify(message.payload);
    // Lower-case names: two spellings of one header would be sent joined, and signed as one of them.
    const headers: Record<string, string> = {};
    for (const [name, value] of [...Object.entries(this.options.headers ?? {}), ...Object.entries(message.headers)])
      headers[name.toLowerCase()] = value;
    // Any key travels: one that is not visible ASCII goes as RFC 8187 UTF-8 (common/header-value.ts).
    if (message.key !== null) headers[KEY_HEADER.toLowerCase()] = encodeHeaderValue(message.key);
    const { secret } = this.options;
    if (secret && this.options.signatureScheme === 'standard-webhooks') {
      // Standard Webhooks: the message id, the timestamp and the body; nothing else is signed.
      Object.assign(headers, standardWebhookHeaders(secret, { id: message.messageId, body }));
    } else if (secret) {
      // v2: signs the method, the path, the body and every header set above (id, key, the message's own).
      Object.assign(headers, signRequest(secret, { path: new URL(url).pathname, headers, body }));
    }
    // Unsigned, as content-type: proxies may rewrite either.
    headers['user-agent'] = `queuebox/${packageVersion()}`;
    headers['content-type'] = 'application/json';
    const sendable = sendableHeaders(headers);
    let response: Response;
    try {
      response = await fetch(url, {
        method: 'POST',
        headers: sendable,
        body,
        signal: AbortSignal.any([signal, timeout]),
        redirect: 'manual',
      });
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      if (timeout.aborted) throw new PublishError(messages.httpTimeout(this.timeoutMs, url), undefined, { cause: error });
      throw new PublishError(messages.httpNetwork(url, causeOf(error)), undefined, { cause: error });
    }
    // The body is not needed; release the connection.
    await response.body?.cancel().catch(() => undefined);
    if (response.status >= 200 && response.status < 300) return;
    const text = messages.httpStatus(response.status, url);
    if (response.status >= 400 && response.status < 500 && !RETRYABLE_4XX.has(response.status)) {
      throw new PermanentPublishError(text);
    }
    const retryAfter = TOLD_TO_WAIT.has(response.status) && this.maxRetryAfterMs > 0 ? response.headers.get('retry-after') : null;
    const waitMs = retryAfter === null ? undefined : retryAfterMs(retryAfter, response.headers.get('date'));
    if (waitMs === undefined) throw new PublishError(text, response.status);
    const capped = waitMs > this.maxRetryAfterMs;
    const delayMs = Math.min(waitMs, this.maxRetryAfterMs);
    throw new PublishError(messages.httpToldToWait(response.status, url, retryAfter as string, delayMs, capped), response.status, {
      retryAfterMs: delayMs,
    });
  }

  private urlOf(destination: string): string {
    const { destinations } = this.options;
    const url =
      typeof destinations === 'function'
        ? destinations(destination)
        : Object.hasOwn(destinations, destination)
          ? destinations[destination]
          : undefined;
    if (url === undefined) throw new PermanentPublishError(messages.httpNoUrl(destination));
    if (!isHttpUrl(url)) throw new PermanentPublishError(messages.httpUrlInvalid(destination, url));
    return url;
  }
}

/** `headers` as fetch sends them; a header that cannot be sent (a value beyond Latin-1, say) fails every attempt the same way. */
function sendableHeaders(headers: Record<string, string>): Headers {
  try {
    return new Headers(headers);
  } catch (error) {
    throw new PermanentPublishError(messages.httpHeadersInvalid(describeError(error)));
  }
}

/**
 * How long `Retry-After` says to wait, in ms: delay-seconds (a non-negative integer), or an
 * HTTP-date counted from the answer's own `Date` when it has one (the two clocks of the
 * destination agree; ours may not), else from now. A date in the past waits 0; anything else
 * unreadable is undefined (the backoff decides).
 */
export function retryAfterMs(value: string, answeredAt: string | null, now = Date.now()): number | undefined {
  const text = value.trim();
  if (/^\d+$/.test(text)) return Math.min(Number(text), Number.MAX_SAFE_INTEGER / 1000) * 1000;
  const at = Date.parse(text);
  if (!/[A-Za-z]/.test(text) || Number.isNaN(at)) return undefined;
  const sent = answeredAt === null ? Number.NaN : Date.parse(answeredAt);
  return Math.max(0, at - (Number.isNaN(sent) ? now : sent));
}

function isHttpUrl(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  try {
    const { protocol } = new URL(value);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

function causeOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (error as Error)?.message ?? String(error);
}
