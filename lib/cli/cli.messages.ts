/** Migrations 012 and 013 not applied on PostgreSQL: what the claims do meanwhile. */
const CLAIM_FUNCTIONS_NOT_REWRITTEN =
  "not applied: the claim functions are an earlier version's, so claims are sent as statements (one at a time, planned on every call) until you run `queuebox migrate`";

/** Every line the `queuebox` CLI prints about a problem. URLs in them are already masked. */
export const cliMessages = {
  /** What `queuebox migrate` and `queuebox status` say of each migration (a database's driver entry may say otherwise). */
  migrationNotes: {
    schema: {
      applied: 'created the tables with their indexes.',
      notApplied: 'not applied',
    },
    operations: {
      applied: 'created the indexes of sent, processed and dead rows (admin, retention).',
      notApplied: 'not applied: admin queries and retention scan whole tables until you run `queuebox migrate`',
    },
    claims: {
      applied: "created the claims' indexes of pending rows without a key or aggregate.",
      notApplied:
        'not applied: claims are planned on every call, and while keys in flight hold the oldest pending rows they read all of them to reach rows without a key, until you run `queuebox migrate`',
    },
    keyCollation: {
      applied: 'moved the key columns to a binary collation.',
      notApplied: 'not applied',
    },
    claimFunctions: {
      applied: 'nothing to change (the claim functions now come with migration 006).',
      notApplied: 'not applied (changes nothing; `queuebox migrate` records it)',
    },
    instances: {
      applied: 'created the instances table and the claim owner columns, and wrote the claim functions of this version.',
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    },
    claimProbes: {
      applied: "rewrote the claim functions with this version's head probes (served by the key indexes alone).",
      notApplied:
        "not applied: the claim functions are an earlier version's, so claims are sent as statements (planned on every call) until you run `queuebox migrate`",
    },
    rateLimits: {
      applied: 'created the rate limit buckets of outbox.rateLimits.',
      notApplied: 'not applied: needed only with outbox.rateLimits, which then refuses to start until you run `queuebox migrate`',
    },
    renewals: {
      applied: "added when each lease was last renewed, and each instance row's heartbeat count.",
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    },
    pauses: {
      applied: 'added the table of paused destinations and sources (`queuebox pause`).',
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    },
    attempts: {
      applied: "added the attempt history tables and the dead letters' fingerprint.",
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    },
    unkeyedClaims: {
      applied: 'rewrote the claim functions: claims of rows without a key run without the claim lock.',
      notApplied: CLAIM_FUNCTIONS_NOT_REWRITTEN,
    },
    keyedClaims: {
      applied: 'rewrote the claim functions: claims of rows with a key lock those keys and run side by side.',
      notApplied: CLAIM_FUNCTIONS_NOT_REWRITTEN,
    },
    claimPlans: {
      applied: 'set the claim functions to plan with their indexes, whatever the table held when a session first claimed.',
      notApplied:
        'not applied: a session whose first claim found the table empty or never analyzed reads the whole table at every claim until the table is analyzed; run `queuebox migrate`',
    },
  },
  commandUnknown: (name: string) => `unknown command ${JSON.stringify(name)}. Run \`queuebox --help\` for the list.`,
  commandMissing: () => 'no command given. Run `npx --no-install queuebox --help` for the list.',
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
    `--tables ${JSON.stringify(value)} must look like outbox=<table>,inbox=<table>,instances=<table> (any may be left out).`,
  dialectUnknown: (value: string, types: readonly string[]) => `--dialect ${JSON.stringify(value)} must be ${types.join(' or ')}.`,
  connectionRefused: (where: string) => `connection refused by ${where}: is the database server running and listening there?`,
  hostNotFound: (where: string) => `host not found: ${where}. Check the host name in the URL.`,
  connectionTimedOut: (where: string) => `timed out connecting to ${where}: check the host, port and firewall.`,
  authenticationFailed: (user: string, detail: string) =>
    `authentication failed for user ${JSON.stringify(user)}: check the user name and password in the URL (${detail}).`,
  databaseMissing: (database: string) =>
    `database ${JSON.stringify(database)} does not exist: create it first (CREATE DATABASE ...) or fix the URL's path.`,
  connectFailed: (where: string, detail: string) => `could not connect to ${where}: ${detail}`,
  backlogNeedsInstances: (table: string) =>
    `Backlog not shown: table "${table}" is missing (migration 006 not applied). Run \`queuebox migrate\`; until then this version of QueueBox does not start.`,
  blockedByDeadOwners: (count: number) =>
    `${count} of these heads are held by an instance that stopped heartbeating (DEAD): a live replica ends its leases at its next heartbeat, and the keys move again. None live? Start one, or see \`queuebox instances\`.`,
  blockedBySilentOwners: (count: number) =>
    `${count} of these heads are held by an instance that missed two heartbeats (SILENT): paused, stalled or cut off from the database. It keeps them unless it stays silent past its instances.deadAfterMs; see \`queuebox instances\`.`,
  schemaMissing: (tables: string) => `schema missing (${tables}): run \`queuebox migrate\` with the same --url and --tables.`,
  schemaUnrecorded: (tables: string, name: string, migrationsTable: string) =>
    `${tables} already exist but migration ${name} is not recorded in TypeORM's "${migrationsTable}" table. If your DataSource sets migrationsTableName, pass it: --migrations-table <that name>. Were they created from plain SQL? Nothing was changed; if you migrate with TypeORM, record it or drop the tables first.`,
  commandFailed: (detail: string) => `failed: ${detail}`,
  subcommandUnknown: (command: string, name: string, choices: readonly string[]) =>
    `unknown sub-command ${JSON.stringify(name)}: use one of ${choices.join(', ')} (\`queuebox ${command} --help\`).`,
  rowIdMissing: (command: string) => `${command} needs the row id: queuebox ${command} <id> --component outbox|inbox.`,
  extraArguments: (values: readonly string[]) => `unexpected argument(s) ${values.map((v) => JSON.stringify(v)).join(' ')}.`,
  componentMissing: () => '--component is required: outbox or inbox.',
  /** After an empty outbox search that a deleted sent row would explain: the CLI cannot know the app's `outbox.sentRows`. */
  sentRowsMayBeDeleted: () =>
    "An application with outbox.sentRows: 'delete' keeps no sent rows: a message it sent is not found here (docs/delivery.md).",
  componentInvalid: (value: string) => `--component ${JSON.stringify(value)} must be outbox or inbox.`,
  optionRequired: (option: string, why: string) => `${option} is required ${why}.`,
  optionNotHere: (option: string, where: string) => `${option} applies to ${where} only.`,
  pauseTargetMissing: (command: string) =>
    `${command} needs --destination <name> (an outbox destination) or --source <name> (an inbox source).`,
  pauseTargetTwice: (command: string) => `${command} takes --destination or --source, not both.`,
  pauseNameInvalid: (option: string) => `${option} must be a name of 1 to 255 characters.`,
  limitInvalid: (value: string, max: number) => `--limit ${JSON.stringify(value)} must be an integer from 1 to ${max}.`,
  rowIdInvalid: (option: string, value: string) =>
    `${option} ${JSON.stringify(value)} must be a row id (a positive integer, at most 9223372036854775807).`,
  timeInvalid: (option: string, value: string) =>
    `${option} ${JSON.stringify(value)} is not a time: use ISO 8601, e.g. 2026-11-30T14:00:00Z (without a zone it is this machine's local time).`,
  idsWithFilter: () => '--id picks rows by id: it does not combine with --name, --error, --after or --before.',
  bulkWithoutAll: (action: string, component: string) =>
    `${action} without --id, --name, --error, --after or --before would change every dead ${component} row: add a filter, or --all to mean it. Nothing was changed.`,
  nothingSkipped: (what: string, headId: string | undefined) =>
    `nothing skipped: ${what} has no ${headId === undefined ? 'head row' : `head row with id ${headId}`} that is pending or whose lease expired (it may be held by a worker, finished, or not exist). See \`queuebox blocked\`.`,
  verifyIntegerInvalid: (option: string, value: string) => `--${option} ${JSON.stringify(value)} must be a whole number.`,
  verifyScenarioInvalid: (value: string, known: readonly string[]) =>
    `--scenarios: unknown scenario ${JSON.stringify(value)}; use a comma-separated list of ${known.join(', ')}, or none.`,
  verifyInterrupting: () => 'interrupted: stopping the workers and dropping the tables (Ctrl-C again to quit at once and leave them).',
  verifyJsonWritten: (file: string) => `Report written to ${file}.`,
  pathOptionInvalid: (option: string, value: string) =>
    `${option} ${JSON.stringify(value)} must be <path>=<value>, such as order.id=123 (a header: x-tenant=acme).`,
  messagesNameClash: (component: string) =>
    component === 'outbox' ? '--source applies to the inbox: use --destination.' : '--destination applies to the outbox: use --source.',
  messagesScanned: (upTo: string, next: string) =>
    `Scanned up to row ${upTo} (the bounded scan stopped there; older rows were not looked at): continue with --after ${next}.`,
  scanInvalid: (value: string) => `--scan ${JSON.stringify(value)} must be an integer from 1 to 1000000.`,
  messagesMore: (next: string) => `More rows may follow: --after ${next}.`,
  textInvalid: (option: string) => `${option} must be a non-empty text of at most 2000 characters, without a NUL character.`,
};
