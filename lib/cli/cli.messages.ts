/** Every line the `queuebox` CLI prints about a problem. URLs in them are already masked. */
export const cliMessages = {
  commandUnknown: (name: string) => `unknown command ${JSON.stringify(name)}. Run \`queuebox --help\` for the list.`,
  commandMissing: () => 'no command given. Run `queuebox --help` for the list.',
  optionInvalid: (command: string, detail: string) => `${detail}. Run \`queuebox ${command} --help\` for its options.`,
  urlMissing: () => 'no database URL: pass --url, or set QUEUEBOX_DATABASE_URL or DATABASE_URL.',
  urlUnparseable: () =>
    'the database URL is not a valid URL (it is not shown: it may hold a password); expected postgres://user@host:5432/database or mssql://user@host:1433/database, with :password after the user and special characters percent-encoded.',
  urlSchemeUnknown: (scheme: string) =>
    `the database URL has scheme "${scheme}:", which QueueBox does not know; use postgres:// (or postgresql://) or mssql:// (or sqlserver://).`,
  urlNoHost: (masked: string) => `the database URL ${masked} names no host; SQL Server URLs need one (mssql://user@host:1433/database).`,
  urlNoDatabase: (masked: string) => `the database URL ${masked} names no database; add it as the path (…@host:1433/database).`,
  urlBadParameter: (name: string, value: string) => `the database URL's parameter ${name}=${JSON.stringify(value)} must be true or false.`,
  tablesInvalid: (value: string) =>
    `--tables ${JSON.stringify(value)} must look like outbox=<table>,inbox=<table> (either may be left out).`,
  dialectUnknown: (value: string) => `--dialect ${JSON.stringify(value)} must be postgres or mssql.`,
  connectionRefused: (where: string) => `connection refused by ${where}: is the database server running and listening there?`,
  hostNotFound: (where: string) => `host not found: ${where}. Check the host name in the URL.`,
  connectionTimedOut: (where: string) => `timed out connecting to ${where}: check the host, port and firewall.`,
  authenticationFailed: (user: string, detail: string) =>
    `authentication failed for user ${JSON.stringify(user)}: check the user name and password in the URL (${detail}).`,
  databaseMissing: (database: string) =>
    `database ${JSON.stringify(database)} does not exist: create it first (CREATE DATABASE ...) or fix the URL's path.`,
  connectFailed: (where: string, detail: string) => `could not connect to ${where}: ${detail}`,
  schemaMissing: (tables: string) => `schema missing (${tables}): run \`queuebox migrate\` with the same --url and --tables.`,
  schemaUnrecorded: (tables: string, name: string, migrationsTable: string) =>
    `${tables} already exist but migration ${name} is not recorded in TypeORM's "${migrationsTable}" table (were they created from plain SQL?). Nothing was changed; if you migrate with TypeORM, record it or drop the tables first.`,
  commandFailed: (detail: string) => `failed: ${detail}`,
};
