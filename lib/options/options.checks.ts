import { closestName } from '../common/suggest';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { OptionSpec } from './options.table';

// The checks every option goes through; each throws a QueueBoxConfigError naming the option.

export function integer(option: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!isIntegerWithin(value, { min, max })) {
    throw new QueueBoxConfigError(option, messages.optionOutOfRange(option, value, min, max));
  }
  return value;
}

/** Whether `value` is an integer from `bounds.min` to `bounds.max` (the check of every integer option and argument). */
export function isIntegerWithin(value: unknown, bounds: { min: number; max: number }): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= bounds.min && value <= bounds.max;
}

/** A source travels in URLs (`POST <path>/:source`) and in logs: keep it plain. */
export function isSourceName(source: unknown): source is string {
  return typeof source === 'string' && /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(source);
}

/** An integer option of a table (options.table.ts): its value, or `fallback` (default: the table's) when absent. */
export function integerOption(option: string, value: unknown, spec: OptionSpec, fallback?: number): number {
  const bounds = spec.integer as NonNullable<OptionSpec['integer']>;
  return integer(option, value, fallback ?? bounds.default, bounds.min, bounds.max);
}

export function expectObject(option: string, value: unknown): asserts value is object {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new QueueBoxConfigError(option, messages.optionNotObject(option, value));
  }
}

/**
 * Refuses a key not in `known`, suggesting the closest known name, or the name it has here when
 * `renamed` knows it (`initialMs` is `delay` in `retry.backoff`). Own keys only, `__proto__` among them.
 */
export function rejectUnknownKeys(prefix: string, value: object, known: string[], renamed: Record<string, string> = {}): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      const option = `${prefix}${key}`;
      const suggestion = Object.hasOwn(renamed, key) ? renamed[key] : closestName(key, known);
      throw new QueueBoxConfigError(option, messages.optionUnknown(option, suggestion && `${prefix}${suggestion}`));
    }
  }
}
