/** The command line was wrong (unknown command or option, bad URL or --tables): exit code 2. */
export class CliUsageError extends Error {
  override readonly name = 'CliUsageError';
}

/** The command ran and failed (connection, authentication, missing schema, SQL error): exit code 1. */
export class CliFailure extends Error {
  override readonly name = 'CliFailure';
}
