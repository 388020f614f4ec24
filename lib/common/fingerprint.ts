// What a failure is, for the attempt history and the dead-letter groups: its error class (or
// code), and a fingerprint of its message with the ids and numbers taken out, so the same cause
// on a thousand messages is one group (docs/operations.md, "Dead-letter groups").

/** The error class of a row dead-lettered because its claims' leases expired (no error object). */
export const LEASE_EXPIRED_CLASS = 'LeaseExpired';

/** The error class of a head an operator skipped (`QueueBoxAdmin.skipHead`). */
export const SKIPPED_HEAD_CLASS = 'SkippedByAdmin';

/**
 * The fingerprint of every row the reclaim step dead-letters (its `last_error` is "lease expired
 * on attempt N of M: ..."), inlined in the reclaim statements as a literal.
 */
export const RECLAIM_FINGERPRINT = 'LeaseExpired: lease expired on attempt # of #: the worker crashed, was stopped or outlived its lease';

const MAX_CLASS = 200;
const MAX_PATTERN = 300;

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
// A hex run of 8 or more characters with at least one digit and one letter (hashes, ObjectIds, 0x...).
const HEX = /\b(?:0x)?(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b/gi;
const NUMBER = /\d+(?:\.\d+)?/g;
const SPACE = /\s+/g;

/**
 * The class of a failure: the error's `name` (`TypeError`, `PublishError`), with its HTTP
 * `status` (`PublishError/503`) or else its string `code` (`Error/ECONNREFUSED`,
 * `QueryFailedError/23505`) after a slash; `typeof` for a thrown value that is not an Error
 * (`string`). Never throws; at most 200 characters; never contains `: ` (the fingerprint's
 * separator).
 */
export function errorClassOf(failure: unknown): string {
  let name: string;
  try {
    if (failure instanceof Error) {
      const status = (failure as { status?: unknown }).status;
      const code = (failure as { code?: unknown }).code;
      const detail =
        typeof status === 'number' && Number.isInteger(status)
          ? `/${status}`
          : typeof code === 'string' || typeof code === 'number'
            ? `/${code}`
            : '';
      name = `${String(failure.name) || 'Error'}${detail}`;
    } else {
      name = failure === null ? 'null' : typeof failure;
    }
  } catch {
    name = 'unknown';
  }
  return name.replace(/: /g, ':').replace(SPACE, ' ').trim().slice(0, MAX_CLASS) || 'unknown';
}

/**
 * A message with what differs between messages of one cause taken out, in this order: UUIDs
 * become `<uuid>`; hex runs of 8 or more characters with a digit and a letter become `<hex>`;
 * every run of digits (with a decimal part) becomes `#`; whitespace runs become one space; the
 * result is trimmed and cut to 300 characters.
 *
 * @example
 * normalizeErrorMessage('HTTP 503 from https://api.example/orders/123 after 2.5 s') // 'HTTP # from https://api.example/orders/# after # s'
 */
export function normalizeErrorMessage(message: string): string {
  return message.replace(UUID, '<uuid>').replace(HEX, '<hex>').replace(NUMBER, '#').replace(SPACE, ' ').trim().slice(0, MAX_PATTERN);
}

/**
 * A dead letter's fingerprint: `<error class>: <normalized message>`. With the row's destination
 * (outbox) or source (inbox) it names its group. The message is the error's own (`describeError`
 * prefixes it with the name, which the class already says).
 *
 * @example
 * deadLetterFingerprint('PublishError/503', 'PublishError: HTTP 503 for order 42') // 'PublishError/503: HTTP # for order #'
 */
export function deadLetterFingerprint(errorClass: string, described: string): string {
  return `${errorClass}: ${normalizeErrorMessage(messagePart(described))}`;
}

/** `describeError`'s text without its leading `Name [code]: `, when it has one. */
function messagePart(described: string): string {
  const match = /^[A-Za-z_$][\w$]*(?: \[[^\]]*\])?: /.exec(described);
  return match ? described.slice(match[0].length) : described;
}
