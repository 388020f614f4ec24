import type { TableName } from '../../common/identifiers';

/**
 * Quoting for PostgreSQL: table names (validated once, see lib/common/identifiers) and the
 * literals of the serialized claim, which goes with its values inlined (simple query protocol).
 */

/** Quotes a validated table name for PostgreSQL. */
export function pgTable(table: TableName): string {
  return table.schema ? `"${table.schema}"."${table.name}"` : `"${table.name}"`;
}

/** A value inlined into a serialized claim: an integer, a string or a list of strings. */
export type InlineParam = number | string | readonly string[] | null;

/** `statement` with `$1`, `$2`... replaced by the literals of `params`. */
export function inlineParams(statement: string, params: readonly InlineParam[]): string {
  return substituteParams(statement, params, inlineValue, 'value');
}

/** `statement` with each `$n` replaced by `render(values[n - 1])`; a `$n` past the values is an error. */
export function substituteParams<V>(statement: string, values: readonly V[], render: (value: V) => string, what: string): string {
  return statement.replace(/\$(\d+)/g, (_placeholder, n: string) => {
    const index = Number(n) - 1;
    if (index >= values.length) throw new Error(`no ${what} for $${n} (${values.length} given)`);
    return render(values[index]);
  });
}

function inlineValue(value: InlineParam): string {
  if (value === null) return 'NULL';
  if (typeof value === 'number') {
    // Only integers reach SQL text: a NaN or a fraction here is a bug upstream, never a value to send.
    if (!Number.isSafeInteger(value)) throw new Error(`not an integer: ${value}`);
    return value < 0 ? `(${value})` : String(value);
  }
  if (typeof value === 'string') return pgLiteral(value);
  return value.length === 0 ? `'{}'::text[]` : `ARRAY[${value.map(pgLiteral).join(', ')}]::text[]`;
}

/**
 * A string literal that means `value` whatever `standard_conforming_strings` says: quotes doubled,
 * and with backslashes the escape-string form with backslashes doubled (as node-postgres'
 * `escapeLiteral`). A NUL cannot be in a PostgreSQL string at all.
 */
export function pgLiteral(value: string): string {
  if (value.includes('\0')) throw new Error('a PostgreSQL string cannot contain NUL');
  const quoted = `'${value.replace(/'/g, "''")}'`;
  return value.includes('\\') ? ` E${quoted.replace(/\\/g, '\\\\')}` : quoted;
}

const BIGINT_TEXT = /^[0-9]{1,19}$/;
const UUID_TEXT = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * Row ids and claim tokens of a batch as PostgreSQL array literals (`{1,2,3}`), for a parameter
 * cast to `bigint[]` / `uuid[]`: one string per list, where node-postgres would quote and escape
 * every element of a JavaScript array into a string of its own. Values that are not plain ids or
 * UUIDs (a custom claim's) go as the arrays they are, for node-postgres to escape.
 */
export function idArrayParam(ids: readonly string[]): string | readonly string[] {
  return arrayLiteralOf(ids, BIGINT_TEXT);
}

export function uuidArrayParam(uuids: readonly string[]): string | readonly string[] {
  return arrayLiteralOf(uuids, UUID_TEXT);
}

function arrayLiteralOf(values: readonly string[], plain: RegExp): string | readonly string[] {
  for (const value of values) if (typeof value !== 'string' || !plain.test(value)) return values;
  return `{${values.join(',')}}`;
}
