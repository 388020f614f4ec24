import { Inject, Injectable } from '@nestjs/common';
import { decodeHeaderValue } from '../../common/header-value';
import { QUEUEBOX_RECEIVER_OPTIONS } from '../../common/queuebox.constants';
import { verifyRequestSignature } from '../../common/signature';
import { verifyStandardWebhook } from '../../common/standard-webhooks';
import { QueueBoxValidationError, UnknownSourceError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import {
  IDEMPOTENCY_KEY_HEADER,
  MESSAGE_ID_HEADER,
  SIGNATURE_HEADER,
  SIGNED_HEADERS_HEADER,
  TIMESTAMP_HEADER,
  WEBHOOK_ID_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
} from '../../wire-headers';
import { InboxService } from '../inbox.service';
import type { ResolvedReceiverOptions } from './inbox-receiver.options';

/** What the receiver needs from an HTTP request, whatever the platform. */
export interface ReceivedRequest {
  source: string;
  /** HTTP method. Default `POST`. */
  method?: string;
  /**
   * The request path as received (percent-encoded, query string ignored), which a `v2` signature
   * covers. Default `/<receiver.path>/<source>`.
   */
  path?: string;
  /** Header names in lower case, as Node gives them. */
  headers: Record<string, string | string[] | undefined>;
  /** The exact bytes received, when the app keeps them (`NestFactory.create(App, { rawBody: true })`). */
  rawBody?: Buffer;
  /** The body as the platform's parser left it. */
  body: unknown;
}

export interface ReceiverAnswer {
  status: number;
  /** `field` names the invalid part of a message a 400 (or 413) refused. */
  body: { id?: string; duplicate?: boolean; error?: string; message: string; field?: string };
}

// Kept with the message: the sender's own headers, not transport or credentials.
const STORED_HEADER = /^x-/;
const NOT_STORED = new Set([SIGNATURE_HEADER, TIMESTAMP_HEADER, SIGNED_HEADERS_HEADER].map((name) => name.toLowerCase()));

/**
 * The HTTP receiver's logic: size, signature, JSON, idempotency key, then `InboxService.receive`.
 * The idempotency key and the aggregate header are decoded from RFC 8187 `UTF-8''…` form when they
 * come in it (`decodeHeaderValue`), so the stored key is the one the sender had.
 * 202 for a new message, 200 with `duplicate: true` for a repeat, 400 for a missing key or a body
 * that is not JSON, 401 for a bad signature, 404 for an unknown source, 413 above the size limit.
 * With a secret, a request without signature headers gets 401 before its body is looked at.
 */
@Injectable()
export class InboxReceiver {
  constructor(
    private readonly inbox: InboxService,
    @Inject(QUEUEBOX_RECEIVER_OPTIONS) private readonly options: ResolvedReceiverOptions,
  ) {}

  async handle(request: ReceivedRequest, nowSeconds = Math.floor(Date.now() / 1000)): Promise<ReceiverAnswer> {
    const header = (name: string) => {
      const value = request.headers[name.toLowerCase()];
      return Array.isArray(value) ? value[0] : value;
    };
    const contentType = header('content-type') ?? '';
    if (!/^application\/(.+\+)?json\b/i.test(contentType)) return answer(400, messages.receiverNotJson());
    const signed = this.options.secrets.length > 0 || this.options.standardWebhooksSecrets.length > 0;
    // A request that carries a Standard Webhooks signature is judged by that scheme when it is accepted here.
    const standardWebhook = this.options.standardWebhooksSecrets.length > 0 && header(WEBHOOK_SIGNATURE_HEADER) !== undefined;
    const ownScheme = this.options.secrets.length > 0 && header(TIMESTAMP_HEADER) !== undefined && header(SIGNATURE_HEADER) !== undefined;
    // Unsigned requests are refused before their body is serialized (a deeply nested body would throw there).
    if (signed && !standardWebhook && !ownScheme) return answer(401, messages.receiverBadSignature('missing'));
    // The bytes as sent when the app keeps them; otherwise the parsed body serialized again, which
    // reproduces what JSON.stringify produced on the sending side (HttpPublisher does exactly that).
    let raw: Buffer | undefined;
    try {
      raw = request.rawBody ?? (request.body === undefined ? undefined : Buffer.from(JSON.stringify(request.body)));
    } catch {
      return answer(400, messages.receiverNotJson());
    }
    if (raw === undefined) return answer(400, messages.receiverNotJson());
    if (raw.length > this.options.maxBodyBytes) return answer(413, messages.receiverTooLarge(raw.length, this.options.maxBodyBytes));
    if (standardWebhook) {
      const check = verifyStandardWebhook({
        secrets: this.options.standardWebhooksSecrets,
        headers: request.headers,
        body: raw,
        nowSeconds,
        toleranceSeconds: this.options.toleranceSeconds,
      });
      if (check !== 'valid') return answer(401, messages.receiverBadSignature(check));
    } else if (signed) {
      const check = verifyRequestSignature({
        secrets: this.options.secrets,
        method: request.method ?? 'POST',
        path: request.path ?? `/${this.options.path.replace(/^\/|\/$/g, '')}/${encodeURIComponent(request.source)}`,
        headers: request.headers,
        body: raw,
        // Whatever is stored with the message, or decides its key or aggregate, must be signed.
        requiredHeaders: [
          IDEMPOTENCY_KEY_HEADER.toLowerCase(),
          this.options.aggregateHeader.toLowerCase(),
          ...Object.keys(request.headers).filter(isStored),
        ],
        nowSeconds,
        toleranceSeconds: this.options.toleranceSeconds,
        acceptV1: this.options.acceptV1Signatures,
      });
      if (check !== 'valid') return answer(401, messages.receiverBadSignature(check));
    }
    let payload: unknown;
    try {
      payload = request.rawBody ? JSON.parse(request.rawBody.toString('utf8')) : request.body;
    } catch {
      return answer(400, messages.receiverNotJson());
    }
    // A Standard Webhooks request's key is its webhook-id, the one header that scheme signs.
    const keyHeader = standardWebhook
      ? WEBHOOK_ID_HEADER
      : header(IDEMPOTENCY_KEY_HEADER) !== undefined
        ? IDEMPOTENCY_KEY_HEADER
        : MESSAGE_ID_HEADER;
    const sentKey = header(keyHeader);
    if (!sentKey) return answer(400, messages.receiverNoKey());
    // Keys that are not visible ASCII arrive in RFC 8187 form (what HttpPublisher sends): store the key itself.
    const idempotencyKey = decodeHeaderValue(sentKey);
    if (idempotencyKey === undefined) return fieldAnswer('idempotencyKey', messages.receiverHeaderNotUtf8(keyHeader));
    const sentAggregate = header(this.options.aggregateHeader);
    const aggregateId = sentAggregate === undefined ? null : decodeHeaderValue(sentAggregate);
    if (aggregateId === undefined) return fieldAnswer('aggregateId', messages.receiverHeaderNotUtf8(this.options.aggregateHeader));
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(request.headers)) {
      if (isStored(name) && typeof value === 'string') headers[name] = value;
    }
    try {
      const result = await this.inbox.receive({
        source: request.source,
        idempotencyKey,
        aggregateId,
        payload,
        headers,
      });
      return result.duplicate
        ? { status: 200, body: { id: result.id, duplicate: true, message: 'already received' } }
        : { status: 202, body: { id: result.id, duplicate: false, message: 'accepted' } };
    } catch (error) {
      if (error instanceof UnknownSourceError) return answer(404, messages.receiverUnknownSource(request.source));
      if (error instanceof QueueBoxValidationError) {
        const status = error.field === 'payload' && /above the limit/.test(error.message) ? 413 : 400;
        return { status, body: { ...answer(status, error.message).body, field: error.field } };
      }
      throw error;
    }
  }
}

function isStored(name: string): boolean {
  return STORED_HEADER.test(name) && !NOT_STORED.has(name);
}

function answer(status: number, message: string): ReceiverAnswer {
  return { status, body: { error: STATUS_TEXT[status], message } };
}

function fieldAnswer(field: string, message: string): ReceiverAnswer {
  return { status: 400, body: { ...answer(400, message).body, field } };
}

const STATUS_TEXT: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 413: 'Payload Too Large' };
