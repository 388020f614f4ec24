import { closestName } from '../common/suggest';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';

// The checks every option goes through; each throws a QueueBoxConfigError naming the option.

export function integer(option: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new QueueBoxConfigError(option, messages.optionOutOfRange(option, value, min, max));
  }
  return value;
}

export function expectObject(option: string, value: unknown): asserts value is object {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new QueueBoxConfigError(option, messages.optionNotObject(option, value));
  }
}

export function rejectUnknownKeys(prefix: string, value: object, known: string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      const option = `${prefix}${key}`;
      const suggestion = closestName(key, known);
      throw new QueueBoxConfigError(option, messages.optionUnknown(option, suggestion && `${prefix}${suggestion}`));
    }
  }
}
