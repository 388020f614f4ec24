import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/** A table name split into its optional schema and its name, both validated. */
export interface TableName {
  readonly schema?: string;
  readonly name: string;
  /** The name as the user wrote it, for messages and lock keys. */
  readonly qualified: string;
}

// Plain SQL identifiers only: quoting makes them safe, and the limit keeps them portable
// (PostgreSQL truncates at 63 bytes; derived index names add a suffix to the table name).
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;

/** Validates `name` or `schema.name`; throws `QueueBoxConfigError` naming `option` otherwise. */
export function parseTableName(option: string, value: unknown): TableName {
  if (typeof value !== 'string') throw new QueueBoxConfigError(option, messages.tableNameInvalid(option, value));
  const parts = value.split('.');
  if (parts.length > 2 || !parts.every((part) => IDENTIFIER.test(part))) {
    throw new QueueBoxConfigError(option, messages.tableNameInvalid(option, value));
  }
  return parts.length === 2 ? { schema: parts[0], name: parts[1], qualified: value } : { name: parts[0], qualified: value };
}

/** The table `name` in the schema of `table` (a QueueBox table's companions live beside it). */
export function tableBeside(table: TableName, name: string): TableName {
  return table.schema ? { schema: table.schema, name, qualified: `${table.schema}.${name}` } : { name, qualified: name };
}

/**
 * The table of the outbox's rate limit buckets (migration 008): `<outbox>_rate_limits`, in the
 * outbox's schema, so two QueueBoxes of one database keep buckets of their own.
 */
export function rateLimitsTableOf(outbox: TableName): TableName {
  return tableBeside(outbox, `${outbox.name}_rate_limits`);
}

/**
 * The table of paused destinations and sources (migration 010): `<outbox>_pauses`, in the
 * outbox's schema, so two QueueBoxes of one database pause their own (issue 40).
 */
export function pausesTableOf(outbox: TableName): TableName {
  return tableBeside(outbox, `${outbox.name}_pauses`);
}

/**
 * The attempt history of a table (the attempts migration): `<table>_attempts`, in the table's schema, one
 * row per failed attempt of one of its rows.
 */
export function attemptsTableOf(table: TableName): TableName {
  return tableBeside(table, `${table.name}_attempts`);
}

/**
 * The bookkeeping of a partitioned table's partitions (issue 37, docs/partitioning.md):
 * `<table>_partitions`, in the table's schema.
 */
export function partitionsTableOf(table: TableName): TableName {
  return tableBeside(table, `${table.name}_partitions`);
}

/**
 * The partitioned layout's side table of outbox message ids (issue 37): `<outbox>_message_ids`,
 * where `message_id` stays unique across partitions.
 */
export function messageIdsTableOf(outbox: TableName): TableName {
  return tableBeside(outbox, `${outbox.name}_message_ids`);
}

/**
 * The partitioned layout's side table of inbox dedupe keys (issue 37): `<inbox>_keys`, where
 * `(source, idempotency_key)` stays unique across partitions.
 */
export function inboxKeysTableOf(inbox: TableName): TableName {
  return tableBeside(inbox, `${inbox.name}_keys`);
}
