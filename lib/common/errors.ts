const MAX_ERROR_TEXT = 2000;

/**
 * A one-line description of an error that is safe to log or store in `last_error`: its name and
 * message only. TypeORM's `QueryFailedError` carries the SQL and its parameters (payloads,
 * secrets), so the error object itself is never logged.
 */
export function describeError(error: unknown): string {
  let text: string;
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    text = `${error.name}${typeof code === 'string' && !error.message.includes(code) ? ` [${code}]` : ''}: ${error.message}`;
  } else {
    text = String(error);
  }
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT - 1)}…` : text;
}
