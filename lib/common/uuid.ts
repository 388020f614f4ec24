import { createHash, randomFillSync } from 'node:crypto';

// The namespace of QueueBox's derived ids (a fixed random UUID).
const NAMESPACE = Buffer.from('5b0f3c1e8a2d4e6f9c7b1a3d5e7f9b2c', 'hex');

/** A name-based (version 5, SHA-1) UUID: the same name always gives the same id. */
export function uuidV5(name: string): string {
  const bytes = createHash('sha1').update(NAMESPACE).update(name).digest().subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x50;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return formatUuid(bytes);
}

/** Random bytes for uuidV7, drawn 256 ids at a time (as Node's `randomUUID` does): one call to the system's generator per 256 ids. */
const entropy = Buffer.allocUnsafe(16 * 256);
let used = entropy.length;

/**
 * A time-ordered UUID (version 7, RFC 9562): the first 48 bits are the Unix time in milliseconds,
 * the other 74 random. Ids made close in time sort close together, so the outbox's `message_id`
 * index takes the entries of a batch of new messages (and of their claims and completions, which
 * write new entries for the same ids) in a few pages near its right edge, as the primary key does,
 * instead of one random page each: on PostgreSQL the W2 bench drained about a fifth faster
 * (docs/performance.md). The id tells whoever reads it when its message was enqueued, to the
 * millisecond. Node 26 has `crypto.randomUUIDv7`; Node 22, which QueueBox supports, does not.
 */
export function uuidV7(now: number = Date.now()): string {
  if (used === entropy.length) {
    randomFillSync(entropy);
    used = 0;
  }
  const bytes = entropy.subarray(used, used + 16);
  used += 16;
  bytes.writeUIntBE(now, 0, 6);
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return formatUuid(bytes);
}

function formatUuid(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
