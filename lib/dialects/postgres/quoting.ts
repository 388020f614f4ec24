import type { TableName } from '../../common/identifiers';

/**
 * Quoting for PostgreSQL: table names (validated once, see lib/common/identifiers) and the
 * literals of statements that go with their values inlined (simple query protocol): the
 * serialized claim, and a statement sent at READ COMMITTED where the session's default is another
 * level (see `readCommittedSql`).
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

/**
 * `statement` with each `$n` replaced by `values[n - 1]` as an untyped literal: the text
 * node-postgres sends for that parameter (`parameterText`), quoted, or NULL. PostgreSQL infers a
 * quoted literal's type from where it stands, as it infers the parameter's: the statement means
 * what it means with its values sent apart.
 */
export function inlineValues(statement: string, values: readonly unknown[]): string {
  return substituteParams(
    statement,
    values,
    (value) => {
      const text = parameterText(value);
      return text === null ? 'NULL' : pgLiteral(text);
    },
    'value',
  );
}

/**
 * A parameter's text as node-postgres sends it, for the values QueueBox sends (text, numbers,
 * instants, lists of them), or null. An instant in UTC (node-postgres writes the local offset: the
 * same instant). Anything else is a bug upstream, never a value to guess a text for.
 */
function parameterText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return `{${value.map(arrayElementText).join(',')}}`;
  throw new Error(`no SQL text for a parameter of type ${typeof value}`);
}

/** An element of an array literal: NULL, a nested array, or the element's text double-quoted (`\` and `"` escaped). */
function arrayElementText(value: unknown): string {
  const text = parameterText(value);
  if (text === null) return 'NULL';
  return Array.isArray(value) ? text : `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
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
