import type { CanActivate, Type } from '@nestjs/common';
import { standardWebhookKey } from '../../common/standard-webhooks';
import { QueueBoxConfigError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import { KEY_HEADER } from '../../wire-headers';

/**
 * The opt-in HTTP receiver: `POST <path>/:source` stores a message in the inbox.
 * Given as `receiver` beside the other options (also in `forRootAsync`, where it is static).
 */
export interface InboxReceiverOptions {
  /** Route prefix. Default `queuebox/inbox`, so messages go to `POST /queuebox/inbox/<source>`. */
  path?: string;
  /** Shared secret(s) of signed senders (QueueBox's `v2` scheme); several during a rotation. Unset: `standardWebhooksSecret` or `guards` are required. */
  secret?: string | string[];
  /**
   * Standard Webhooks secret(s) (`whsec_<base64>`), several during a rotation: a request carrying
   * `webhook-signature` is verified by that scheme (id, timestamp and body), and its `webhook-id`
   * is the idempotency key. Beside `secret` or instead of it. Default: none.
   */
  standardWebhooksSecret?: string | string[];
  /**
   * Also accept legacy `v1` signatures (timestamp and body only: a captured request can be replayed
   * within the window with another idempotency key, path or headers). Only while senders upgrade to
   * `v2`. Default false.
   */
  acceptV1Signatures?: boolean;
  /** How far a signature's timestamp may be from now, in seconds. Default 300. */
  toleranceSeconds?: number;
  /** Largest accepted body, in bytes. Default 1048576. (Raise your body parser's limit to match: Express's default is 100 kB.) */
  maxBodyBytes?: number;
  /** The header whose value becomes the message's aggregate id. Default `X-QueueBox-Key` (what `HttpPublisher` sends). */
  aggregateHeader?: string;
  /** Nest guards run before the receiver (your authentication). Required when no `secret` is set. */
  guards?: (Type<CanActivate> | CanActivate)[];
}

export interface ResolvedReceiverOptions {
  path: string;
  secrets: string[];
  standardWebhooksSecrets: string[];
  acceptV1Signatures: boolean;
  toleranceSeconds: number;
  maxBodyBytes: number;
  aggregateHeader: string;
  guards: (Type<CanActivate> | CanActivate)[];
}

const KEYS = [
  'path',
  'secret',
  'standardWebhooksSecret',
  'acceptV1Signatures',
  'toleranceSeconds',
  'maxBodyBytes',
  'aggregateHeader',
  'guards',
];

/** Validates the receiver options. An open write endpoint is never the default: no secret and no guard fails. */
export function resolveReceiverOptions(receiver: InboxReceiverOptions): ResolvedReceiverOptions {
  const fail = (option: string, message: string) => new QueueBoxConfigError(`receiver.${option}`, message);
  if (typeof receiver !== 'object' || receiver === null) throw fail('', messages.optionNotObject('receiver', receiver));
  for (const key of Object.keys(receiver)) if (!KEYS.includes(key)) throw fail(key, messages.optionUnknown(`receiver.${key}`));
  const path = receiver.path ?? 'queuebox/inbox';
  if (typeof path !== 'string' || !/^\/?[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*\/?$/.test(path))
    throw fail('path', messages.receiverPathInvalid(path));
  const secrets = receiver.secret === undefined ? [] : Array.isArray(receiver.secret) ? receiver.secret : [receiver.secret];
  if (secrets.some((secret) => typeof secret !== 'string' || secret.length < 16))
    throw fail('secret', messages.secretTooShort('receiver.secret'));
  const given = receiver.standardWebhooksSecret;
  const standardWebhooksSecrets = given === undefined ? [] : Array.isArray(given) ? given : [given];
  if (standardWebhooksSecrets.some((secret) => !standardWebhookKey(secret)))
    throw fail('standardWebhooksSecret', messages.standardWebhookSecretInvalid('receiver.standardWebhooksSecret'));
  const guards = receiver.guards ?? [];
  if (!Array.isArray(guards)) throw fail('guards', messages.receiverGuardsInvalid());
  if (secrets.length === 0 && standardWebhooksSecrets.length === 0 && guards.length === 0) throw fail('secret', messages.receiverOpen());
  const positive = (option: 'toleranceSeconds' | 'maxBodyBytes', fallback: number, max: number) => {
    const value = receiver[option] ?? fallback;
    if (!Number.isInteger(value) || value < 1 || value > max)
      throw fail(option, messages.optionOutOfRange(`receiver.${option}`, value, 1, max));
    return value;
  };
  const acceptV1Signatures = receiver.acceptV1Signatures ?? false;
  if (typeof acceptV1Signatures !== 'boolean')
    throw fail('acceptV1Signatures', messages.optionNotBoolean('receiver.acceptV1Signatures', acceptV1Signatures));
  const aggregateHeader = receiver.aggregateHeader ?? KEY_HEADER;
  if (typeof aggregateHeader !== 'string' || !/^[A-Za-z0-9-]+$/.test(aggregateHeader)) {
    throw fail('aggregateHeader', messages.optionNotNonEmptyString('receiver.aggregateHeader', aggregateHeader));
  }
  return {
    path,
    secrets,
    standardWebhooksSecrets,
    acceptV1Signatures,
    toleranceSeconds: positive('toleranceSeconds', 300, 86_400),
    maxBodyBytes: positive('maxBodyBytes', 1_048_576, 1024 ** 3),
    aggregateHeader,
    guards,
  };
}
