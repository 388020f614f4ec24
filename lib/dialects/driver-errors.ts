// Reading a database driver's errors: the one place outside a dialect folder that knows how
// TypeORM and the drivers wrap them. Each dialect names its own codes.

/** The driver's own error inside a TypeORM `QueryFailedError` (or the error itself). */
export function driverErrorOf(error: unknown): {
  code?: unknown;
  number?: unknown;
  constraint?: unknown;
  detail?: unknown;
  message?: unknown;
} {
  const driver = (error as { driverError?: unknown } | null)?.driverError ?? error;
  return (driver ?? {}) as ReturnType<typeof driverErrorOf>;
}

/** The first UUID in `text`, lower case (a message id a unique violation names). */
export function uuidIn(text: string): string | undefined {
  return /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i.exec(text)?.[0]?.toLowerCase();
}
