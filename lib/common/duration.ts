import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/**
 * A duration: milliseconds as a number, or a string with a unit: `'500ms'`, `'30s'`, `'5m'`,
 * `'1h'`, `'1d'` (decimals allowed: `'1.5s'`).
 *
 * @example
 * QueueBoxModule.forRoot({ outbox: { publisher, publishTimeout: '30s', retry: { backoff: { delay: '1s', maxDelay: '5m' } } } })
 */
export type Duration = number | string;

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/;

/**
 * Parses a `Duration` into whole milliseconds, within `[min, max]`. Throws `QueueBoxConfigError`
 * naming `option` when the value is not a duration or out of range.
 */
export function parseDuration(option: string, value: unknown, range: { min: number; max: number }): number {
  let ms: number;
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new QueueBoxConfigError(option, messages.durationInvalid(option, value));
    ms = value;
  } else if (typeof value === 'string') {
    const match = PATTERN.exec(value);
    if (!match) throw new QueueBoxConfigError(option, messages.durationInvalid(option, value));
    ms = Math.round(Number(match[1]) * UNITS[match[2]]);
  } else {
    throw new QueueBoxConfigError(option, messages.durationInvalid(option, value));
  }
  if (ms < range.min || ms > range.max)
    throw new QueueBoxConfigError(option, messages.durationOutOfRange(option, value, range.min, range.max));
  return ms;
}
