import { createHash } from 'node:crypto';

// The namespace of QueueBox's derived ids (a fixed random UUID).
const NAMESPACE = Buffer.from('5b0f3c1e8a2d4e6f9c7b1a3d5e7f9b2c', 'hex');

/** A name-based (version 5, SHA-1) UUID: the same name always gives the same id. */
export function uuidV5(name: string): string {
  const bytes = createHash('sha1').update(NAMESPACE).update(name).digest().subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x50;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
