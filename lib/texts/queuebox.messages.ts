/**
 * Every error and log text QueueBox produces, in one place. Each message says what happened and,
 * where the reader can act, what to do. Values from users are shown with `show()`, never raw
 * payloads or SQL parameters.
 */
/** The decorator that injects a named QueueBox's service, for the services whose calls take a manager. */
const INJECT_DECORATORS: Record<string, string> = {
  OutboxService: 'InjectOutbox',
  InboxService: 'InjectInbox',
  LeaseService: 'InjectLeaseService',
};

const show = (value: unknown): string => {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  if (typeof value === 'object') return 'an object';
  return String(value);
};

/** Where a message's reader finds a doc: the docs ship in the package (`files` in package.json). */
const doc = (file: string): string => `node_modules/queuebox/docs/${file}`;

const capitalize = (text: string) => text.charAt(0).toUpperCase() + text.slice(1);

/** Names the publishes that ignored their abort at shutdown (at most ten ids): each may be delivered twice. */
const duplicatesNamed = (messageIds: string[]): string =>
  messageIds.length === 0
    ? ''
    : ` The publish of message(s) ${messageIds.slice(0, 10).join(', ')}${messageIds.length > 10 ? ` and ${messageIds.length - 10} more` : ''} ignored its abort signal and went on after the shutdown stopped waiting: another replica publishes each again, so each may be delivered twice (the destination must deduplicate on X-Message-Id).`;

export const messages = {
  // Options (QueueBoxConfigError)
  optionUnknown: (option: string, suggestion?: string) =>
    `Unknown QueueBox option "${option}".${suggestion ? ` Did you mean "${suggestion}"?` : ''} See the configuration reference in README.md.`,
  optionNotObject: (option: string, value: unknown) => `QueueBox option "${option}" must be an object, got ${show(value)}.`,
  optionNotBoolean: (option: string, value: unknown) => `QueueBox option "${option}" must be true or false, got ${show(value)}.`,
  optionNotFunction: (option: string) => `QueueBox option "${option}" must be a function.`,
  optionNotNonEmptyString: (option: string, value: unknown) =>
    `QueueBox option "${option}" must be a non-empty string, got ${show(value)}.`,
  optionOutOfRange: (option: string, value: unknown, min: number, max: number) =>
    `QueueBox option "${option}" must be an integer from ${min} to ${max}, got ${show(value)}.`,
  durationInvalid: (option: string, value: unknown) =>
    `QueueBox option "${option}" must be a duration: whole milliseconds (30000) or a number with a unit, "ms", "s", "m", "h" or "d" ("500ms", "30s", "1.5m", "1h"); got ${show(value)}.`,
  durationOutOfRange: (option: string, value: unknown, min: number, max: number) =>
    `QueueBox option "${option}" must be a duration from ${min} ms to ${max} ms, got ${show(value)}.`,
  publishTimeoutNotBelowLease: (timeoutMs: number, leaseMs: number) =>
    `QueueBox option "outbox.publishTimeout" (${timeoutMs} ms) must be below "outbox.claimTimeoutMs" (${leaseMs} ms): a publish must end, or be aborted, while its claim is still held. Lower the timeout or raise the lease.`,
  retryAndOlderOption: (prefix: string, older: string) =>
    `Set either "${prefix}.retry" or "${prefix}.${older}", not both: "retry" replaces "maxAttempts" and "backoff" (retry: { attempts, backoff }).`,
  retryInvalid: (option: string, value: unknown) =>
    `QueueBox option "${option}" must be false (no retry), a number of attempts, or { attempts, backoff, retryIf }; got ${show(value)}.`,
  retryMaxDelayBelowDelay: (option: string, maxMs: number, initialMs: number) =>
    `QueueBox option "${option}.maxDelay" (${maxMs} ms) must not be below "${option}.delay" (${initialMs} ms).`,
  backoffMaxBelowInitial: (option: string, maxMs: number, initialMs: number) =>
    `QueueBox option "${option}.maxMs" (${maxMs}) must not be below "${option}.initialMs" (${initialMs}).`,
  sourceNameInvalid: (source: unknown) =>
    `Inbox source ${show(source)} is not a valid name: use 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit.`,
  tableNameInvalid: (option: string, value: unknown) =>
    `QueueBox option "${option}" must be a table name or schema.table, each part a letter or underscore followed by up to 47 letters, digits or underscores; got ${show(value)}.`,
  tablesCollide: (name: string) =>
    `Two of the QueueBox options "tables.outbox", "tables.inbox" and "tables.instances" name ${show(name)}; give each table its own name.`,
  publisherAndPublishers: () =>
    'Set either "outbox.publisher" (one publisher for every message) or "outbox.publishers" (named publishers with "outbox.route"), not both.',
  publisherInvalid: (option: string) =>
    `QueueBox option "${option}" must be a Publisher: an object with a publish(message, signal) method, or a class with one (Nest instantiates it and injects its dependencies).`,
  publisherCreateFailed: (option: string, name: string, error: string) =>
    `QueueBox could not instantiate publisher class ${name} ("${option}"): ${error}. Its dependencies must be visible from QueueBoxModule: global providers (e.g. ClientsModule.register({ isGlobal: true, ... })) or modules given in forRootAsync({ imports }).`,
  publisherMissing: () =>
    'The outbox worker runs but no publisher is configured: set "outbox.publisher" (or "outbox.publishers"), or turn the worker off with "workers: { outbox: false }" on replicas that only enqueue.',
  queueBoxNameInvalid: (name: unknown) =>
    `QueueBox option "name" must be a name of 1 to 63 letters, digits, "_", "-" or "." (it appears in tokens, metrics and logs): got ${show(name)}.`,
  queueBoxNameTaken: (name: string, dataSources: [string, string]) => {
    const [first, second] = [...dataSources].sort();
    const other = dataSources.find((dataSource) => dataSource !== 'default') ?? second;
    return `Two QueueBox modules are named ${show(name)} (on DataSources ${show(first)} and ${show(second)}): class injection would pick one of them at random. Give each QueueBox but one a name of its own, e.g. QueueBoxModule.forRoot({ name: ${show(other)}, dataSource: ${show(other)}, ... }), and inject it with @InjectOutbox(${show(other)}) (getOutboxServiceToken(${show(other)})).`;
  },
  queueBoxTablesShared: (first: string, second: string, dataSource: string, table: string) =>
    `QueueBoxes ${show(first)} and ${show(second)} both use table ${show(table)} of DataSource ${show(dataSource)}: their workers would claim each other's rows with each other's publishers and handlers. Give one of them other tables ("tables"), or use one QueueBox.`,
  queueBoxInstancesTableShared: (first: string, second: string, table: string) =>
    `QueueBoxes ${show(first)} and ${show(second)} share the instances table ${show(table)}: a replica that dies is found dead by one of them, and the other recovers its claims only one instances.deadAfterMs later. Give each its own "tables.instances".`,
  queueBoxUnknown: (name: string, names: string[]) =>
    `No QueueBox is named ${show(name)}; ${names.length === 0 ? 'none is registered' : `the application has ${names.map(show).join(', ')}`}. Name one with QueueBoxModule.forRoot({ name: ${show(name)}, ... }), or attach a tenant of that name (QueueBoxTenants.attach).`,
  managerOfAnotherQueueBox: (
    call: string,
    own: string,
    ownDataSource: string,
    others: string[],
    otherDataSource: string,
    otherIsTenant: boolean,
  ) => {
    const service = call.split('.')[0];
    const use = otherIsTenant
      ? `Use the tenant's own: queueBoxRegistry.get(${show(others[0])}).get(${service}) (or the entry QueueBoxTenants.attach returned).`
      : `Inject the one of that DataSource: @${INJECT_DECORATORS[service] ?? `Inject${service}`}(${show(others[0])}).`;
    return `${call} was given a transaction of DataSource ${show(otherDataSource)}, which belongs to QueueBox ${others.map(show).join(' and ')}; this ${service} belongs to QueueBox ${show(own)} (DataSource ${show(ownDataSource)}). ${use}`;
  },
  pullHandlerQueueBoxUnknown: (name: string, names: string[]) =>
    `it names QueueBox ${show(name)}, which the application does not have (it has ${names.map(show).join(', ')}): its messages would never be handled. Name one of those, or register that QueueBox with QueueBoxModule.forRoot({ name: ${show(name)}, ... }).`,
  tenantNameTaken: (name: string) =>
    `A QueueBox named ${show(name)} exists already (a tenant, or a QueueBoxModule.forRoot({ name })), or is being attached or detached now: detach it first, or give the tenant another name.`,
  tenantUnknown: (name: string, names: string[]) =>
    `No tenant named ${show(name)} is attached${names.length > 0 ? ` (attached: ${names.map(show).join(', ')})` : ''}, or it is being attached or detached now.`,
  tenantDataSourceNotInitialized: (name: string) =>
    `QueueBoxTenants.attach(${show(name)}) needs an initialized TypeORM DataSource in options.dataSource; the one given is none, or not initialized (never, or destroyed since). Attach once \`await dataSource.initialize()\` (and its migrations) has resolved; a destroyed DataSource cannot be attached again: create and initialize a new one.`,
  tenantAttached: (name: string) => `Tenant ${show(name)} attached: its QueueBox runs.`,
  tenantDetached: (name: string) =>
    `Tenant ${show(name)} detached: its QueueBox stopped (its DataSource is left open for the application to destroy).`,
  dataSourceMissing: (name: string | undefined) =>
    `QueueBox found no TypeORM DataSource${name ? ` named ${show(name)}` : ''}. Import TypeOrmModule.forRoot(${name ? `{ name: ${show(name)}, ... }` : '...'}) in the same application, or set "dataSource" to the name of the one you use.`,
  tableMissing: (name: string) =>
    `QueueBox table ${show(name)} does not exist. Add QueueBoxSchema1764460800000 (or createQueueBoxMigration({ tables })) to your TypeORM migrations and run them, or apply sql/<dialect>/001_queuebox.up.sql.`,
  instancesTableMissing: (name: string, migration: string) =>
    `QueueBox table ${show(name)} does not exist: this version needs migration ${migration} (the instances table and the claim owner columns). Add it to your TypeORM migrations (QueueBoxMigrations has every one) and run them, or apply sql/<dialect>/006_queuebox_instances.up.sql. With other table names, set tables.instances to where it is.`,
  pausesTableMissing: (name: string, migration: string) =>
    `QueueBox table ${show(name)} does not exist: this version needs migration ${migration} (the paused destinations and sources, which every claim reads). Add it to your TypeORM migrations (QueueBoxMigrations has every one) and run them, or apply sql/<dialect>/010_queuebox_pauses.up.sql.`,
  migrationsMissing: (names: string[], migrationsTable: string) =>
    `QueueBox cannot start: the database lacks migration${names.length > 1 ? 's' : ''} ${names.join(', ')} (not recorded in TypeORM's migrations table ${show(migrationsTable)}). Add ${names.length > 1 ? 'them' : 'it'} to your DataSource's "migrations" after the QueueBox migrations you have (the classes of that name exported by "queuebox", or the create...Migration({ tables, name }) factories) and run them (migrationsRun: true), or run \`npx --no-install queuebox migrate${migrationsTable === 'migrations' ? '' : ` --migrations-table ${migrationsTable}`}\`. See ${doc('schema.md')}.`,
  migrationMissingOptional: (name: string, migrationsTable: string, consequence: string) =>
    `QueueBox migration ${name} is not recorded in TypeORM's migrations table ${show(migrationsTable)}: ${consequence} Add it to your DataSource's "migrations", or run \`npx --no-install queuebox migrate${migrationsTable === 'migrations' ? '' : ` --migrations-table ${migrationsTable}`}\`.`,
  operationsMigrationOptional: () =>
    'admin queries and retention scan whole tables until it runs (it is required when retention.enabled is true).',
  claimsMigrationOptional: () =>
    'claims stay correct but are planned on every call and read every pending row of keys in flight to reach rows without a key.',
  optionDeprecated: (option: string, replacement: string, hint: string) =>
    `Option ${option} is deprecated and will be removed: use ${replacement} (${hint}). It still works the same.`,
  eventRenamed: (old: string, renamed: string) =>
    `QueueBox event "${old}" was renamed "${renamed}" in 0.2 (the relay is named the relay everywhere): listen to the new name; the old one is delivered until 0.3.`,
  leaseClaimRemoved: () =>
    'LeaseService.claim was removed in QueueBox 0.2.0 (deprecated in 0.1): claim with PullClient.claim(source, { leaseMs, maxAttempts? }) (inject PullClient, or use createPullClient(dataSource) outside Nest), and finish the claim through LeaseService as before.',
  createLeaseServiceRemoved: () =>
    'createLeaseService was removed in QueueBox 0.2.0 (deprecated in 0.1): use createPullClient(dataSource, options), which resolves to { pull, lease }: claim with pull.claim(...), finish with lease.complete(...).',
  claimingPausedStuck: (name: string) =>
    `${name}: every one of its concurrency slots is held by calls that timed out and still run (they ignore their abort signal): it claims nothing until one ends, and gave back what was waiting for a slot, for other replicas to take. Make the handler or publisher honour its signal.`,
  claimingResumed: (name: string) => `${name}: a slot held by a timed-out call was freed; claiming again.`,
  preparedStatementsLost: (name: string, code: string, inTransaction: boolean) =>
    `the statement ${name}, prepared on its connection, was not found there (SQLSTATE ${code}): a pooler in transaction mode (PgBouncer before 1.21, or without max_prepared_statements) hands each transaction another server session. Claims and QueueBox's other prepared statements are sent unprepared from now on (parsed at every call); ${
      inTransaction
        ? "the transaction it ran in failed and rolled back (a pull handler's or a relay forward's messages are tried again, as after any failed attempt)."
        : 'it was sent again unprepared, and nothing was lost.'
    }`,
  claimFunctionsOutdated: (migration: string) =>
    `the claim functions in the database were written by an older QueueBox version: claims are sent as statements instead (correct, planned on every call) until migration ${migration} runs (\`queuebox migrate\`, or add it to your DataSource's migrations: [...QueueBoxMigrations]).`,
  claimFunctionsMigrationOptional: () =>
    'it runs no statement in this version (the claim functions come with migration 006); add it so the list is whole.',
  rateLimitsMigrationOptional: () =>
    'it creates the rate limit buckets, which only outbox.rateLimits uses (none is set here); run it before you set one.',
  claimProbesMigrationOptional: () =>
    "on PostgreSQL it rewrites the claim functions: until it runs QueueBox sees they are an earlier version's and sends the claim statements instead (correct, planned on every call); on SQL Server it runs no statement.",
  unkeyedClaimsMigrationOptional: () =>
    "on PostgreSQL it rewrites the claim functions so that claims of rows without a key run side by side: until it runs QueueBox sees they are an earlier version's and sends the claim statements instead (correct, one claim at a time, planned on every call); on SQL Server it runs no statement.",
  keyedClaimsMigrationOptional: () =>
    "on PostgreSQL it rewrites the claim functions so that claims of rows with a key run side by side, each locking the keys it takes: until it runs QueueBox sees they are an earlier version's and sends the claim statements instead (correct, one claim at a time, planned on every call); on SQL Server it runs no statement.",
  claimPlansMigrationOptional: () =>
    'on PostgreSQL it sets the claim functions to plan with their indexes: until it runs, a session whose first claim found the table empty or never analyzed reads the whole table at every claim, until the table is analyzed (claims stay correct); on SQL Server it runs no statement.',
  keyCollationMigrationOptional: () =>
    'on PostgreSQL it runs no statement (keys already compare byte for byte); add it so the list matches SQL Server.',
  schemaVersionUnchecked: (name: string, migrationsTable: string) =>
    `QueueBox tables exist but migration ${name} is not recorded in TypeORM's migrations table ${show(migrationsTable)} (created from plain SQL?): their version is not checked at start-up; apply every sql/<dialect>/NNN_*.up.sql script of this version.`,
  migrationNameInvalid: (name: string) =>
    `QueueBox migration name ${show(name)} must be an identifier ending in a 13-digit timestamp, like "QueueBoxSchema1764460800000".`,

  // Start-up
  nodeVersionUnsupported: (running: string, supported: string) =>
    `QueueBox runs on Node.js ${running}, outside the versions it supports and is tested on (${supported}, package.json "engines"). It keeps running, but upgrade Node.js: Node 20 and older lines have reached their end of life.`,

  // Messages given to enqueue (QueueBoxValidationError)
  messageNotObject: (subject: string) => `${subject} must be an object.`,
  messageFieldInvalid: (subject: string, field: string, rule: string) => `${subject}: "${field}" ${rule}.`,
  payloadUnserializable: (subject: string, reason: string) =>
    `${subject}: the payload cannot be stored as JSON (${reason}). Convert BigInt, cyclic or undefined values first.`,
  payloadTooLarge: (subject: string, bytes: number, limit: number) =>
    `${subject}: the payload is ${bytes} bytes of JSON, above the limit of ${limit} ("maxPayloadBytes"). Store large data elsewhere and send a reference.`,
  nulCharacter: () => 'a NUL character (\\u0000)',
  loneSurrogate: () => 'a lone UTF-16 surrogate (half of a character, e.g. from a string cut in the middle of an emoji)',
  fieldUnstorable: (what: string) => `contains ${what}, which the database cannot store`,
  headerUnstorable: (subject: string, name: string, what: string) =>
    `${subject}: header ${show(name)} contains ${what}, which the database cannot store.`,
  headerNameInvalid: (subject: string, name: string) =>
    `${subject}: header name ${show(name)} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_\`|~ only): it could never be sent.`,
  headerValueLineBreak: (subject: string, name: string) =>
    `${subject}: header ${show(name)} contains a line break (CR or LF), which no HTTP header may: it could never be sent.`,
  headersTooLarge: (subject: string, bytes: number, limit: number) =>
    `${subject}: the headers are ${bytes} bytes of JSON, above the limit of ${limit}. Put large data in the payload.`,
  availableAtOutOfRange: () => 'must be between the years 1 and 9999 (the range both databases store)',
  messageIdRepeated: (subject: string, messageId: string) =>
    `${subject}: "messageId" ${messageId} is given to an earlier message of the same call; each message needs its own id.`,
  messageIdTaken: (messageId: string | undefined) =>
    `An outbox message with "messageId" ${messageId ?? '(one of those given)'} already exists; nothing of this call was stored. Give each message its own id (or leave it out for a new UUID). On PostgreSQL the failed insert aborted your transaction: roll it back. To enqueue a message once whatever was enqueued before, pass { onDuplicate: 'ignore' }.`,
  sentRowsInvalid: (value: unknown) =>
    `outbox.sentRows must be 'keep' (sent rows stay until retention deletes them, the default) or 'delete' (the completion deletes each sent row); got ${show(value)}.`,
  sentRowsNotKept: (what: string) =>
    `${what} needs the outbox's sent rows, and this app deletes them when sent (outbox.sentRows: 'delete'): there are none to read. Count sent messages with the metric queuebox_outbox_messages_sent_total instead, or set outbox.sentRows to 'keep' (sent rows written from then on are kept).`,
  onDuplicateInvalid: (value: unknown) =>
    `The "onDuplicate" option of enqueue must be 'error' (a taken messageId throws DuplicateMessageIdError) or 'ignore' (it stores nothing and reports the stored row); got ${show(value)}.`,
  relayMessageIdTaken: (messageId: string | undefined) =>
    `The relay route returned "messageId" ${messageId ?? '(one of its messages)'}, which an outbox message already has: dead-lettered at once, since every attempt would collide. Give each forwarded message its own id, or leave it out (the relay derives one from the inbox row).`,
  sourceUnknown: (source: string) =>
    `Inbox source ${show(source)} has no consumer: add a route for it in "inbox.relay.routes" or a @PullHandler(${show(source)}), so its messages do not pile up unseen.`,
  managerRequired: () =>
    'OutboxService.enqueue(manager, message) needs the EntityManager of your transaction (dataSource.transaction(async (manager) => ...)), so the message commits or rolls back with your change; enqueue(message) without it joins the active @nestjs-cls/transactional transaction.',
  ambientPackageMissing: (call: string) =>
    `${call} was called without an EntityManager, which joins the active transaction of @nestjs-cls/transactional (and its TypeORM adapter, @nestjs-cls/transactional-adapter-typeorm); that package is not installed where QueueBox can load it. Install both (npm install @nestjs-cls/transactional @nestjs-cls/transactional-adapter-typeorm nestjs-cls) and register ClsPluginTransactional, or pass the manager of your transaction.`,
  ambientTransactionNone: (call: string, dataSource: string, served: boolean) =>
    served
      ? `${call} was called without an EntityManager and no @nestjs-cls/transactional transaction of DataSource ${show(dataSource)} is active here: the message would commit on its own. Call it inside a @Transactional() method (or TransactionHost.withTransaction), or pass the manager of your transaction. (Propagation NOT_SUPPORTED, NEVER and SUPPORTS without a transaction run without one.)`
      : `${call} was called without an EntityManager, but no @nestjs-cls/transactional TransactionHost serves DataSource ${show(dataSource)}: register ClsPluginTransactional with a TransactionalAdapterTypeOrm whose dataSourceToken is that DataSource's (getDataSourceToken(${dataSource === 'default' ? '' : show(dataSource)})), or pass the manager of your transaction.`,
  transactionRequired: (call: 'enqueue' | 'receive') =>
    call === 'enqueue'
      ? 'OutboxService.enqueue() was given an EntityManager that is not in a transaction (such as dataSource.manager): the message would commit on its own, whether or not your change does. Pass the manager of dataSource.transaction(async (manager) => ...). A script that means it can pass { allowAutocommit: true } as the third argument.'
      : 'InboxService.receive() was given an EntityManager that is not in a transaction (such as dataSource.manager). Pass the manager of dataSource.transaction(async (manager) => ...) to store the message with your change, or no manager to store it on its own.',
  queryTimedOut: (timeoutMs: number) =>
    `A QueueBox statement got no answer within ${timeoutMs} ms (a third of the shortest lease): the connection was discarded and the work is retried. A lock held elsewhere, an overloaded database or a silent network partition does this; see "Timeouts" in docs/runbook.md.`,
  connectTimedOut: (timeoutMs: number) =>
    `QueueBox got no database connection within ${timeoutMs} ms (a third of the shortest lease) and gave up; the work is retried. Every connection of the pool was busy, or a new connection got no answer (a silent network partition): give the pool a connect timeout (\`connectTimeoutMS\`, node-postgres' \`connectionTimeoutMillis\`) and see "Timeouts" in docs/runbook.md.`,
  transactionLost: () =>
    "The statement was not run: the connection of the given EntityManager's transaction was released or broke (the database ended the session or the network dropped it). QueueBox never falls back to another connection, which would commit the write on its own: the transaction is gone, so run the whole unit of work again.",

  errorUndescribable: (kind: string) =>
    `a thrown ${kind} that cannot be described (converting it to text threw: an object without a prototype, a revoked Proxy, or a throwing message or toString); throw an Error instead`,

  // Worker logs (outbox poller, inbox relay, pull workers)
  workerStarted: (name: string, concurrency: number, batchSize: number, leaseMs: number) =>
    `${capitalize(name)} started (concurrency ${concurrency}, batch ${batchSize}, lease ${leaseMs} ms).`,
  claimFailed: (name: string, error: string, retryMs: number) =>
    `${capitalize(name)}: claim failed: ${error}. Trying again in ${retryMs} ms, or as soon as the database answers again.`,
  claimRecovered: (name: string, failures: number) =>
    `${capitalize(name)}: claims work again after ${failures} failed attempt(s); waking the other workers.`,
  workFailed: (name: string, id: string, error: string) =>
    `${capitalize(name)}: unexpected error on row ${id}: ${error}. The row is retried after its lease expires.`,
  reclaimed: (name: string, pending: number, dead: number) =>
    `${capitalize(name)}: reclaimed ${pending + dead} row(s) whose lease expired: ${pending} back to pending, ${dead} dead after their last attempt.`,
  reclaimFailed: (name: string, error: string) => `${capitalize(name)}: reclaim step failed: ${error}. It runs again at the next interval.`,
  shutdownWaiting: (name: string, inFlight: number, timeoutMs: number) =>
    `${capitalize(name)} shutting down: waiting up to ${timeoutMs} ms for ${inFlight} message(s) in flight.`,
  shutdownAbandoned: (name: string, inFlight: number) =>
    `${capitalize(name)}: shutdown timeout reached with ${inFlight} message(s) still in flight: their signals are aborted and their outcomes not written; their rows are released (back to pending, no attempt charged) when this instance deregisters.`,
  releaseFailed: (id: string, error: string) =>
    `Could not give back unstarted claim ${id} on shutdown: ${error}. It is claimed again when its lease expires.`,
  shutdownDone: (name: string) => `${capitalize(name)} stopped.`,
  notRunning: (what: string) => `${capitalize(what)} is not available: QueueBox is shutting down or has not started.`,
  finishLost: (messageId: string, what: string) =>
    `Lost the claim on message ${messageId} before recording its ${what}; leaving it to the new owner.`,
  finishFailed: (messageId: string, what: string, error: string) =>
    `Could not record the ${what} of message ${messageId}: ${error}. It stays processing and is retried after its lease expires.`,
  deadLettered: (messageId: string, reason: string) => `Message ${messageId} is dead: ${reason}`,
  pullAttemptsExpired: (attempts: number, maxAttempts: number) =>
    `lease expired on attempt ${attempts} of ${maxAttempts}: the worker crashed, was stopped or outlived its lease on every claim (dead before the handler ran again)`,
  attemptsExhausted: (attempts: number, error: string) => `failed ${attempts} attempt(s); last error: ${error}`,

  // Outbox poller
  publishFailed: (messageId: string, attempt: number, error: string, delayMs: number) =>
    `Publish of message ${messageId} failed on attempt ${attempt}: ${error}. Retrying in ${delayMs} ms.`,
  routeUnknown: (name: unknown) => `no publisher named ${show(name)} (check "outbox.route" and "outbox.publishers")`,
  routeFailed: (error: string) => `"outbox.route" threw, so no publisher could be chosen: ${error}`,
  publishTimedOut: (timeoutMs: number) => `the publish took longer than "outbox.publishTimeout" (${timeoutMs} ms) and was aborted`,
  publishBatchResultInvalid: (count: number, given: string) =>
    `"publishBatch" resolved to ${given}, not nothing or one settled result ({ status: 'fulfilled' } or { status: 'rejected', reason }) for each of its ${count} message(s), in their order: the call counts as failed for every message (retried)`,
  publishBatchMessages: (messageId: string, count: number) =>
    count === 1 ? messageId : `${messageId} (and ${count - 1} more of its "publishBatch" call)`,
  publishOverrunningTimeout: (messageId: string, timeoutMs: number, graceMs: number, count: number) =>
    `The publish of message ${messageId} was aborted by its timeout ("outbox.publishTimeout", ${timeoutMs} ms), but the publisher ignores its signal and is still running ${graceMs} ms later: its concurrency slot stays taken until it ends (${count} such publish(es) now), and the retry may deliver the message a second time. Make the publisher honour its AbortSignal.`,
  publishOverrunningClaimLost: (messageId: string, graceMs: number, count: number) =>
    `The publish of message ${messageId} was aborted because its claim was lost, but the publisher ignores its signal and is still running ${graceMs} ms later: its concurrency slot stays taken until it ends (${count} such publish(es) now), and the claim's new owner may deliver the message a second time. Make the publisher honour its AbortSignal.`,
  publishOverrunningShutdown: (messageId: string, shutdownTimeoutMs: number, graceMs: number, count: number) =>
    `The publish of message ${messageId} was aborted by the shutdown (it ran past "outbox.shutdownTimeoutMs", ${shutdownTimeoutMs} ms), but the publisher ignores its signal and is still running ${graceMs} ms later (${count} such publish(es) now): its row is released when this instance deregisters and another replica publishes it again, so it may be delivered twice. Make the publisher honour its AbortSignal.`,
  handlerTimedOut: (what: string, option: string, timeoutMs: number) =>
    `${what} took longer than "${option}" (${timeoutMs} ms): its signal was aborted and the attempt failed; its transaction, if any, can only roll back`,
  retryDeclined: (attempt: number, error: string) => `not retried ("retryIf" returned false) after attempt ${attempt}: ${error}`,
  leaseTooShortRenewFailed: (messageId: string, error: string) =>
    `Message ${messageId} was not published: too little of its lease was left for "outbox.publishTimeout" and the renewal failed (${error}). It is claimed again when its lease expires.`,
  markSentLost: (messageId: string, silence?: string) =>
    `Lost the claim on message ${messageId} before marking it sent: it was published, and the new owner will publish it again (the destination must deduplicate on X-Message-Id). ${silence ?? 'Raise "outbox.claimTimeoutMs" above the slowest publish.'}`,
  publishClaimLost: (messageId: string, silence?: string) =>
    `Lost the claim on message ${messageId} while publishing (lease renewal failed); leaving it to the next owner.${silence ? ` ${silence}` : ''}`,

  rateLimitTakeFailed: (destination: string, error: string) =>
    `Could not take rate limit tokens for destination ${show(destination)}: ${error}. Its claimed messages are put off (no attempt charged) and tried again; if the table is missing, run migration 008 (queuebox migrate).`,

  // Work notifications
  notificationsUp: () => 'Listening for new work (LISTEN/NOTIFY): workers wake as soon as messages commit.',
  notificationsDown: (error: string) =>
    `Not receiving work notifications (${error}); reconnecting. Workers fall back to polling meanwhile.`,

  // Pull workers
  pullHandlerTwice: (source: string, first: string, second: string) =>
    `Two @PullHandler methods consume source ${show(source)}: ${first} and ${second}. Keep one; a source has one consumer.`,
  pullHandlerAndRoute: (source: string, handler: string) =>
    `Source ${show(source)} has both a relay route ("inbox.relay.routes") and a @PullHandler (${handler}). Keep one; a source has one consumer.`,
  pullPoolTight: (concurrency: number, poolSize: number, forHandlers: number) =>
    `Pull handlers may run ${concurrency} transactions at once but the TypeORM pool has ${poolSize} connections, of which QueueBox keeps ${poolSize - forHandlers} for itself (LISTEN, lease renewals): handlers beyond ${forHandlers} wait for a connection (renewals never do). Raise the pool size ("extra.max") or lower the handlers' concurrency.`,
  renewalsCouldStarve: (poolSize: number, needed: number, concurrency: number, claimers: number, retention: number) =>
    `The TypeORM pool ("pool.max") has ${poolSize} connection(s), but on SQL Server lease renewals cannot have a connection of their own and share the pool: it needs at least ${needed} (${concurrency} for the pull handlers' transactions, their total concurrency; ${claimers} for the claim loops; ${retention ? `${retention} for retention, its lock and one delete batch; ` : ''}1 for renewals), or a full pool makes renewals wait until leases expire and handlers run a second time. Raise "pool.max" to at least ${needed}, or lower the handlers' concurrency. See docs/sqlserver.md.`,
  poolTooSmall: (poolSize: number, minimum: number, listen: number, renewals: number) =>
    `The TypeORM pool has ${poolSize} connection(s) but QueueBox needs at least ${minimum}: ${[
      listen ? '1 kept LISTENing for new work' : '',
      renewals ? '1 kept for the lease renewals of pull handlers' : '',
      '1 to claim, complete and run handler transactions',
    ]
      .filter(Boolean)
      .join(
        ', ',
      )}. With fewer, workers wait forever for a connection. Set the pool size ("extra.max" or "poolSize" on PostgreSQL, "pool.max" on SQL Server) to at least ${minimum}, plus what your application uses at once.`,
  pullHandlerFailed: (id: string, handler: string, attempt: number, error: string, delayMs: number) =>
    `Pull handler ${handler} failed on message ${id} (attempt ${attempt}): ${error}. Rolled back; retrying in ${delayMs} ms.`,
  pullBatchFailed: (handler: string, handled: number, claimed: number, error: string) =>
    `Pull handler ${handler} failed on a batch of ${handled} messages (${error}); no message is charged for it: each of the ${claimed} claimed runs alone now, and only one that fails alone counts an attempt.`,
  pullClaimLost: (id: string, handler: string, silence?: string) =>
    `Lost the claim on message ${id} while ${handler} ran: its transaction was rolled back and the new owner handles the message. ${silence ?? `Raise the handler's "leaseMs" if this repeats.`}`,

  // Inbox relay
  relayFailed: (id: string, attempt: number, error: string, delayMs: number) =>
    `Forward of inbox message ${id} failed on attempt ${attempt}: ${error}. Retrying in ${delayMs} ms.`,
  relayMarkLost: (source: string, key: string, silence?: string) =>
    `Lost the claim on inbox message ${source}/${key} before marking it processed: its outbox insert was rolled back and the new owner forwards it. ${silence ?? 'Raise "inbox.relay.claimTimeoutMs" if this repeats.'}`,
  outboxFollowersReadFailed: (error: string) =>
    `The outbox poller could not read the messages after those it claimed (${error}); publishing the claimed ones alone.`,
  outboxBatchOrderBroken: (failedId: string, laterId: string) =>
    `"publishBatch" reported outbox message ${laterId} published although ${failedId}, before it in the same call and of the same key, failed, and its publisher sets "keepsBatchOrder": ${laterId} is not marked sent and goes out again after ${failedId}, so the destination may have it twice and out of order. Set "keepsBatchOrder" only on a publisher that sends a call's messages in order and stops at a failure.`,
  outboxFollowerFailed: (messageId: string, headId: string, error: string) =>
    `Publishing outbox message ${messageId} after ${headId} (a follower of its key) failed: ${error}. It stays pending, its attempt not counted, and is published next as a claim of its own.`,
  relayFollowersReadFailed: (error: string) =>
    `The inbox relay could not read the rows after the heads it claimed (${error}); forwarding the heads alone.`,
  relayClaimLost: (source: string, key: string, silence?: string) =>
    `Lost the claim on inbox message ${source}/${key} before forwarding it (lease renewal failed); leaving it to the next owner.${silence ? ` ${silence}` : ''}`,

  // Lease
  claimLost: (component: string, id: string) => `The ${component} claim on row ${id} is lost.`,
  followersChanged: (source: string) =>
    `A batch of pull source "${source}" rolled back: rows it handled after their aggregate's head changed before its commit (an operator's write?). The batch will be tried again.`,
  leaseArgumentInvalid: (where: string, field: string, rule: string, value: unknown) =>
    `${where}: "${field}" ${rule}, got ${show(value)}. Nothing was claimed.`,

  // ClientProxy publisher
  clientProxyInvalid: () =>
    'ClientProxyPublisher needs a ClientProxy from @nestjs/microservices (ClientsModule.register(...) / ClientProxyFactory.create(...)): an object with emit(pattern, data).',
  clientProxyTokenInvalid: (token: unknown) =>
    `ClientProxyPublisher.for(token) needs the injection token of a ClientsModule client (a string or symbol), got ${show(token)}.`,
  clientProxyEmitFailed: (transport: string, pattern: string, error: string) => `${transport} emit to ${show(pattern)} failed: ${error}`,
  microservicesMissing: () =>
    "ClientProxyPublisher needs the optional peer dependency @nestjs/microservices (and your transport's client package): npm install @nestjs/microservices.",

  // HTTP publisher
  receiverPathInvalid: (path: unknown) => `QueueBox option "receiver.path" must be a URL path like "queuebox/inbox", got ${show(path)}.`,
  receiverGuardsInvalid: () => 'QueueBox option "receiver.guards" must be an array of Nest guards (classes or instances).',
  receiverOpen: () =>
    'The inbox receiver would accept unauthenticated writes: set "receiver.secret" (senders sign with HMAC-SHA256; HttpPublisher does with its "secret"), "receiver.standardWebhooksSecret" (Standard Webhooks senders) or pass your own "receiver.guards".',
  receiverNotJson: () => 'The body must be JSON, sent with Content-Type: application/json.',
  receiverTooLarge: (bytes: number, limit: number) => `The body is ${bytes} bytes; the limit is ${limit} ("receiver.maxBodyBytes").`,
  receiverBadSignature: (check: string) =>
    check === 'missing'
      ? 'The request is not signed: X-QueueBox-Timestamp and X-QueueBox-Signature are required.'
      : check === 'stale'
        ? 'The signature timestamp is outside the allowed window ("receiver.toleranceSeconds"); check the sender\'s clock or resend.'
        : check === 'unsigned-header'
          ? 'A header the receiver stores or uses (Idempotency-Key, the aggregate key, any X- header) is not listed in X-QueueBox-Signed-Headers: sign it (see docs/inbox.md, "Signing requests").'
          : check === 'v1-refused'
            ? 'v1 signatures (timestamp and body only) are not accepted here: sign with v2 (see docs/inbox.md, "Signing requests"), or set "receiver.acceptV1Signatures" while senders upgrade.'
            : `The signature is ${check === 'malformed' ? 'malformed' : 'not valid for this request and secret'}.`,
  receiverHeaderNotUtf8: (header: string) =>
    `The ${header} header has the RFC 8187 form UTF-8'<language>'<percent-encoded bytes>, but its bytes are not UTF-8.`,
  receiverNoKey: () => 'An Idempotency-Key or X-Message-Id header is required, so a resent message is stored once.',
  receiverUnknownSource: (source: string) => `No consumer for source ${show(source)} here.`,
  standardWebhookSecretInvalid: (option: string) =>
    `"${option}" must be a Standard Webhooks secret: "whsec_" followed by the base64 of at least 16 random bytes (e.g. "whsec_" + randomBytes(32).toString('base64')).`,
  signatureSchemeInvalid: (value: unknown) =>
    `HttpPublisher "signatureScheme" must be 'queuebox' (QueueBox's v2 scheme, the default) or 'standard-webhooks'; got ${show(value)}.`,
  signatureSchemeNeedsSecret: () => 'HttpPublisher "signatureScheme" is set but "secret" is not: set the secret the scheme signs with.',
  secretTooShort: (option: string) => `"${option}" must be a string of at least 16 characters (use a random value, e.g. 32 bytes in hex).`,
  httpNoUrl: (destination: string) => `no URL is configured for destination ${show(destination)}`,
  httpHeadersInvalid: (error: string) => `the message's headers cannot be sent over HTTP: ${error}`,
  httpStatus: (status: number, url: string) => `HTTP ${status} from ${url}`,
  httpToldToWait: (status: number, url: string, retryAfter: string, waitMs: number, capped: boolean) =>
    `HTTP ${status} from ${url}: told to wait (Retry-After: ${retryAfter}); next attempt in ${waitMs} ms${capped ? ' (capped by HttpPublisher "maxRetryAfterMs")' : ''}`,
  httpTimeout: (timeoutMs: number, url: string) => `no answer from ${url} within ${timeoutMs} ms`,
  httpNetwork: (url: string, reason: string) => `request to ${url} failed: ${reason}`,
  httpDestinationsInvalid: () =>
    'HttpPublisher needs "destinations": an object mapping each destination to an http(s) URL, or a function (destination) => URL | undefined.',
  httpUrlInvalid: (destination: string, url: unknown) =>
    `HttpPublisher: destination ${show(destination)} maps to ${show(url)}, which is not an http(s) URL.`,

  // Admin and retention (QueueBoxAdmin, RetentionService)
  retentionInboxTooShort: (valueMs: number, minimumMs: number) =>
    `QueueBox option "retention.inboxFinishedAfterMs" is ${valueMs} ms, below the minimum of ${minimumMs} ms: a processed inbox row is the record that dedupes a redelivery, and a sender retrying after its row was deleted would be accepted twice. Use at least ${minimumMs} ms, and longer than your senders retry.`,
  instanceRegisterFailed: (error: string, heartbeatMs: number) =>
    `Could not register this QueueBox instance in the instances table: ${error}. Retrying every heartbeat (${heartbeatMs} ms); until then a replica cannot tell if this one dies, and its claims wait for their leases to expire.`,
  instanceWaitsForDataSource: (name: string, dataSource: string) =>
    `QueueBox ${show(name)} waits for its DataSource ${show(dataSource)} to be initialized (TypeORM's manualInitialization): once initialize() has resolved, it checks the schema, registers this instance and starts its workers, in that order.`,
  instanceStartedLate: (name: string, dataSource: string, id: string) =>
    `DataSource ${show(dataSource)} initialized: QueueBox ${show(name)} checked the schema, registered instance ${id} and starts its workers.`,
  instanceStartFailed: (name: string, dataSource: string, error: string, heartbeatMs: number) =>
    `QueueBox ${show(name)} cannot start yet on DataSource ${show(dataSource)}, initialized after start-up: none of its workers claims until it can, and it tries again every ${heartbeatMs} ms (instances.heartbeatMs). The cause: ${error}`,
  instanceDeregisterFailed: (error: string, duplicates: string[]) =>
    `Could not deregister this QueueBox instance: ${error}. What it still holds stays processing until a live replica declares it dead (its heartbeats stopped) or the lease expires, and is claimed again then.${duplicatesNamed(duplicates)}`,
  instanceDeregisteredReleased: (outbox: number, inbox: number, duplicates: string[]) =>
    `Left the instances table and released ${outbox} outbox and ${inbox} inbox row(s) still claimed (work abandoned at shutdown): back to pending, no attempt charged, for another replica to claim now; the abandoned work can no longer complete them.${duplicatesNamed(duplicates)}`,
  claimEndedBySilence: (silentMs: number, deadAfterMs: number, beatsFailed: boolean, declaredDead: boolean | undefined) =>
    `The lease was not the cause: no heartbeat of this instance got through for about ${silentMs} ms, more than instances.deadAfterMs (${deadAfterMs} ms) (${beatsFailed ? 'its heartbeats failed: the database was out of reach' : 'no heartbeat ran: an event-loop stall or a paused process'}), so ${declaredDead ? 'another replica declared it dead' : 'other replicas may have declared it dead'} and ended its leases. ${beatsFailed ? 'Look at the database connection' : 'Find what stalls or pauses the process (long synchronous work, GC pauses, CPU throttling, a stopped or frozen container or VM)'}, or raise instances.deadAfterMs above the longest such silence; a longer lease does not help.`,
  instanceIdShared: (id: string, newId: string) =>
    `Another live process heartbeats as QueueBox instance ${id}: its row counts heartbeats this process did not send. A copy of this process shares its id (a process cloned after start-up, a VM restored from a snapshot while the original runs). Registering as ${newId} instead, so that the two do not beat one row and the clean shutdown of one cannot end the other's leases; claims this process made before now keep the old id.`,
  instanceIdRegistered: (
    id: string,
    newId: string,
    host: string,
    pid: number,
    startedAt: Date,
    heartbeatAgeMs: number,
    sameProcess: boolean,
  ) =>
    `QueueBox instance id ${id} is registered already (host ${host}, pid ${pid}, started ${startedAt.toISOString()}, last heartbeat ${heartbeatAgeMs} ms ago${sameProcess ? ': the same host and pid as this process, so a copy of it (a cloned process, a VM restored from a snapshot) or an earlier registration of its own whose answer was lost' : ''}). Registering as ${newId} instead of taking that row over: two processes beating one row would be one instance to the other replicas, and the clean shutdown of one would end the other's leases.`,
  instanceRegisterRefused: (tries: number) =>
    `QueueBox could not register this instance: ${tries} new ids in a row were reported taken, which random ids never are. Check what else writes to the instances table (a trigger, a view in its place).`,
  instanceDeclaredDead: (id: string, deadAfterMs: number) =>
    `This QueueBox instance (${id}) was declared dead by another replica: it missed its heartbeats for more than ${deadAfterMs} ms (a pause, or the database out of reach). Its leases were ended and its rows claimed again elsewhere: what it still works on fails its fence and is not completed here. Registered again.`,
  instanceHeartbeatFailed: (error: string, silentMs: number, deadAfterMs: number) =>
    silentMs >= deadAfterMs
      ? `QueueBox heartbeats have failed for about ${silentMs} ms, past instances.deadAfterMs (${deadAfterMs} ms): other replicas may declare this instance dead and claim its rows again. Last error: ${error}`
      : `A QueueBox heartbeat failed: ${error}. Retrying at the next beat; after ${deadAfterMs} ms without one, other replicas declare this instance dead.`,
  instanceHeartbeatBack: (failed: number) => `QueueBox heartbeats work again after ${failed} failed.`,
  instanceEndDeadFailed: (error: string) => `Could not look for dead QueueBox instances: ${error}. Trying again at the next heartbeat.`,
  instanceDead: (id: string, host: string | null, pid: number | null, lastHeartbeatAt: Date | null, outbox: number, inbox: number) =>
    `QueueBox instance ${id} (${host}, pid ${pid}) is dead: no heartbeat since ${lastHeartbeatAt?.toISOString()}. Ended its leases: ${outbox} outbox and ${inbox} inbox rows are claimed again now.`,
  unregisteredInstanceClaimsEnded: (id: string, outbox: number, inbox: number) =>
    `QueueBox instance ${id} is no longer registered but still held claims (declared dead, it claimed rows before it could register again, and stopped): ended their leases, ${outbox} outbox and ${inbox} inbox rows are claimed again now.`,
  deadAfterTooShort: (deadAfterMs: number, heartbeatMs: number, beats: number) =>
    `QueueBox option "instances.deadAfterMs" is ${deadAfterMs} ms, shorter than ${beats} heartbeats of ${heartbeatMs} ms: one slow heartbeat would declare a live instance dead and end its leases. Use at least ${beats * heartbeatMs} ms, or a shorter "instances.heartbeatMs".`,
  adminArgumentInvalid: (field: string, rule: string, value: unknown) =>
    `QueueBoxAdmin: "${field}" ${rule}, got ${show(value)}. Nothing was changed.`,
  adminPathRule: () =>
    'must be { path, equals, in? } with a dotted path of 1 to 16 segments (a header: 1), each 1 to 100 letters, digits, "_" or "-" (such as order.id or items.0.sku)',
  adminRowIdRule: (max: bigint) => `must be a row id (a positive integer as a string, at most ${max})`,
  adminTextNul: () =>
    'contains a NUL character (\\u0000), which QueueBox never stores (PostgreSQL text cannot hold one), so no row can match it',
  adminSelectionAmbiguous: () =>
    'QueueBoxAdmin: pass either "ids" or filter fields (name, key, errorContains, deadAfter, deadBefore), not both. Nothing was changed.',
  adminSelectionEmpty: () =>
    'QueueBoxAdmin: this call would touch every dead row of the component: pass "ids", a filter field, or "all: true" to mean it. Nothing was changed.',
  skipHeadReason: (reason: string) => `skipped by admin: ${reason}`,
  // Pauses (issue 40)
  pausePaused: (component: string, name: string, actor: string, reason: string | null) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} paused by ${show(actor)}${reason === null ? '' : ` (${show(reason)})`}: claims skip its rows until it is resumed; its rows keep their order.`,
  pauseAlready: (component: string, name: string, actor: string) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} was paused already (${show(actor)} asked again): the first pause is kept.`,
  pauseResumed: (component: string, name: string, actor: string) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} resumed by ${show(actor)}: its rows are claimed again, in order.`,
  pauseNotPaused: (component: string, name: string, actor: string) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} was not paused (${show(actor)} asked to resume it): nothing changed.`,
  pauseSeen: (component: string, name: string, pausedBy: string | null, reason: string | null) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} is paused (by ${show(pausedBy ?? 'unknown')}${reason === null ? '' : `: ${show(reason)}`}): this process's claims skip its rows until it is resumed.`,
  resumeSeen: (component: string, name: string) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} of the ${component} is no longer paused: this process's claims take its rows again.`,
  pauseNameRule: () => 'must be a destination or source name: a non-empty string of at most 255 characters',
  retentionStarted: (intervalMs: number) => `Retention started (every ${intervalMs} ms; one replica at a time).`,
  retentionSkipped: () => 'Retention skipped: another replica holds the retention lock.',
  retentionDone: (outbox: number, inbox: number, dead: number, ms: number) =>
    `Retention deleted ${outbox} sent outbox row(s), ${inbox} processed inbox row(s) and ${dead} dead row(s) in ${ms} ms.`,
  retentionLeftRunning: (waitMs: number) =>
    `Retention: the batch in progress did not end within ${waitMs} ms of shutdown (the longest shutdownTimeoutMs); it is left to end with its connection when the DataSource closes. Each batch is one statement: nothing is left half done, and the next run deletes what it did not.`,
  retentionFailed: (error: string, intervalMs: number) =>
    `Retention failed: ${error}. Rows deleted so far stay deleted; it runs again in ${intervalMs} ms.`,

  // The partitioned layout's upkeep (issue 37)
  partitionCreated: (table: string, name: string, from: string, to: string, spanMs: number) =>
    `Partition ${show(name)} of ${show(table)} created ahead for ids ${from} to ${to} (excluded): about ${spanMs} ms of traffic at the highest recent rate.`,
  partitionSettled: (table: string, name: string) =>
    `Partition ${show(name)} of ${show(table)} is settled: no insert can reach it and none of its rows is pending or processing, so claims no longer look into it.`,
  partitionUnsettled: (table: string, name: string) =>
    `Partition ${show(name)} of ${show(table)} was settled but holds a pending or processing row again: claims look into it again from now on. A replay unsettles its partition itself; if none ran, a transaction that took an id of this partition had not yet written its row when the partition was settled. The row is claimed now; nothing was lost.`,
  partitionDropped: (table: string, name: string, from: string, to: string) =>
    `Retention dropped partition ${show(name)} of ${show(table)} (ids ${from} to ${to}, excluded): every row of it was finished and past its retention age.`,
  partitionReattached: (table: string, name: string, unfinished: boolean) =>
    `Retention detached partition ${show(name)} of ${show(table)}, then found it ${unfinished ? 'holds a pending or processing row' : 'holds a row finished more recently than its retention age'} (a replay, or a transaction that committed late) and attached it again: nothing was dropped, and its rows are claimed and kept as before. The next run tries again.`,
  partitionUpkeepStarted: (everyMs: number) =>
    `Partition upkeep started (every ${everyMs} ms; one replica at a time): the outbox and inbox are partitioned, and partitions are kept ahead of the ids in use.`,
  partitionUpkeepFailed: (error: string, everyMs: number) =>
    `Partition upkeep failed: ${error}. It runs again in ${everyMs} ms; inserts go on into the partitions made ahead (docs/partitioning.md).`,
  partitionsDropped: (outbox: readonly string[], inbox: readonly string[]) =>
    `Retention dropped ${outbox.length + inbox.length} partition(s) whose rows were all past their age${outbox.length + inbox.length ? `: ${[...outbox, ...inbox].join(', ')}` : ''}.`,
  partitionedLayoutUnsupported: (type: string) =>
    `The partitioned layout is built for PostgreSQL only; this DataSource is ${show(type)}. Leave createQueueBoxPartitionedLayoutMigration out of its migrations (docs/partitioning.md).`,
  partitionedLayoutNeedsEmptyTables: (outbox: string, inbox: string) =>
    `The partitioned layout is made from empty tables, and ${show(outbox)} or ${show(inbox)} holds a row: nothing was changed. Moving tables with rows to the partitioned layout is not built yet (docs/partitioning.md, step 5).`,

  // PostgreSQL
  postgresVersionUnsupported: (version: string, minimumMajor: number) =>
    `QueueBox supports PostgreSQL ${minimumMajor} and later; this server runs PostgreSQL ${version}. Upgrade the server (${minimumMajor} to 18 are tested). See ${doc('operations.md')}.`,

  // SQL Server
  dialectNotSupported: (type: unknown, supported: readonly { type: string; displayName: string }[]) =>
    `QueueBox supports TypeORM DataSources of type ${supported.map((d) => `"${d.type}"`).join(' and ')} (${supported.map((d) => d.displayName).join('; ')}); this one is ${show(type)}.`,
  sqlServerRequestTimeoutTooShort: (option: string, timeoutMs: number, minimumMs: number, lockWaitMs: number) =>
    `The SQL Server request timeout is ${timeoutMs} ms (TypeORM option "${option}"), but a QueueBox claim may wait ${lockWaitMs} ms for its application lock before its statement runs: claims would fail spuriously. Raise "${option}" to at least ${minimumMs} (or 0 for none). See ${doc('sqlserver.md')}.`,
  sqlServerClaimLockNotGranted: (lock: string, result: number) =>
    result === -1
      ? `The claim lock ${show(lock)} was not granted within its wait (sp_getapplock returned -1): another claim held it that long. The claim is tried again; if this repeats, look for a claim blocked behind a long transaction (see ${doc('sqlserver.md')}, READ_COMMITTED_SNAPSHOT).`
      : `The claim lock ${show(lock)} was not granted: sp_getapplock returned ${result} (${result === -2 ? 'the request was cancelled' : result === -3 ? 'chosen as a deadlock victim' : 'a parameter or call error'}). The claim is tried again.`,
  sqlServerKeyCollationMissing: (table: string, columns: string[], collation: string, migration: string) =>
    `QueueBox table ${show(table)} on SQL Server compares ${columns.map((c) => `"${c}"`).join(', ')} under the database's collation, not ${collation}: keys that differ only in case would count as one (a receive dropped as a duplicate, two keys ordered as one). Run migration ${migration} (createQueueBoxKeyCollationMigration({ tables }), or sql/sqlserver/004_queuebox_key_collation.up.sql). See docs/sqlserver.md.`,
  sqlServerKeyTooLong: (field: string, length: number, max: number) =>
    `QueueBoxAdmin: "${field}" is ${length} characters long, but on SQL Server the column it is compared with holds at most ${max}, so no row can match it. Nothing was read or changed.`,
  sqlServerTrailingSpace: (subject: string, field: string) =>
    `${subject}: "${field}" ends with a space. SQL Server's "=" ignores trailing spaces under every collation, so it would be the same key as the text without them: trim it, or end it with another character. Nothing was stored.`,
  sqlServerReadCommittedSnapshotOff: (searchLockWaitMs: number, followersLockWaitMs: number) =>
    `SQL Server: READ_COMMITTED_SNAPSHOT is OFF in this database. QueueBox claims stay correct, but their reads wait for row locks: while an open transaction holds a row of an outbox key or inbox aggregate (an enqueue() or receive() not yet committed), that key's later rows wait for it, and a claim that meets such a row passes over that key after waiting at most ${searchLockWaitMs} ms, every claim in turn, while the other keys are claimed as usual; a followers read that meets one waits at most ${followersLockWaitMs} ms and then hands out no followers. Keep transactions that enqueue or receive short, or turn it on (ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON) unless your application relies on locking reads. See docs/sqlserver.md.`,
  sqlServerClaimRowLockTimeout: (lock: string, rowLockWaitMs: number) =>
    `A claim under the lock ${show(lock)} waited more than ${rowLockWaitMs} ms for a row lock (SQL Server error 1222) while locking or updating the rows it found: another transaction holds an index entry those rows need. Nothing was claimed; the claim is tried again (see docs/sqlserver.md, READ_COMMITTED_SNAPSHOT).`,
  sqlServerAdminBusy: (lockWaitMs: number) =>
    `SQL Server: this admin statement waited more than ${lockWaitMs} ms for a row lock (error 1222): a transaction holds rows it reads or changes (a claim, a completion, an open enqueue() or receive() with READ_COMMITTED_SNAPSHOT OFF). Nothing was changed; try again. See docs/sqlserver.md (Admin and retention).`,
  sqlServerRetentionLockFailed: (result: number) =>
    `SQL Server: the retention lock was not granted: sp_getapplock returned ${result} (${result === -2 ? 'the request was cancelled' : result === -3 ? 'chosen as a deadlock victim' : 'a parameter or call error'}), not -1 (held by another replica). This retention run is skipped; the next one tries again.`,
  sqlServerCompatibilityLevelTooLow: (level: number) =>
    `QueueBox on SQL Server needs database compatibility level 130 (SQL Server 2016) or higher for OPENJSON; this database is at ${level}. Raise it with ALTER DATABASE ... SET COMPATIBILITY_LEVEL = 130 (or higher).`,

  // Debug log of outcomes (QueueBoxEventLog)
  logPublished: (messageId: string, destination: string, attempt: number, ms: number) =>
    `outbox message ${messageId} published to ${show(destination)} (attempt ${attempt}, ${Math.round(ms)} ms)`,
  logProcessed: (component: string, id: string, attempt: number, ms: number) =>
    `${component === 'pull' ? 'pull' : 'relay'} message ${id} processed (attempt ${attempt}, ${Math.round(ms)} ms)`,
  logReclaimed: (component: string, name: string, pending: number, dead: number) =>
    `${component} reclaim for ${show(name)}: ${pending} back to pending, ${dead} dead (lease expired)`,

  // Health
  healthDraining: () => 'The application is shutting down: QueueBox stopped claiming and is draining its work in flight.',
  healthWorkerStuck: (name: string, seconds: number) =>
    `The ${name} has not completed a claim cycle for ${seconds} s: its work may be stuck (see ${doc('operations.md')}, runbook).`,
  healthHeartbeatsFailing: (silentMs: number, deadAfterMs: number) =>
    `This instance's heartbeats have failed for about ${silentMs} ms, at least instances.deadAfterMs (${deadAfterMs} ms): other replicas may declare it dead and claim its rows again.`,
  healthDatabaseDown: (reason: string) => `The database does not answer: ${reason}`,
  healthLagging: (where: string, seconds: number, maxLagMs: number) =>
    `The oldest due message of ${where} has waited ${seconds} s, more than ${maxLagMs / 1000} s (see ${doc('operations.md')}, runbook: the backlog grows).`,
  healthBacklogFailed: (reason: string) => `The backlog could not be read: ${reason}`,
  healthInstanceSilent: (state: 'silent' | 'dead', heartbeatAgeSeconds: number, deadAfterMs: number) =>
    `This instance's last heartbeat landed ${heartbeatAgeSeconds} s ago by the database clock: the instances table shows it ${
      state === 'silent'
        ? `SILENT (more than two thirds of instances.deadAfterMs, ${deadAfterMs} ms). Past instances.deadAfterMs other replicas declare it dead and end its leases.`
        : `DEAD (more than instances.deadAfterMs, ${deadAfterMs} ms): a live replica ends its leases at its next heartbeat.`
    } Its heartbeats are late: an event-loop stall, a slow database, or a pool that keeps the heartbeat waiting (see ${doc('operations.md')}, instance states).`,
  healthInstancesFailed: (reason: string) => `The instances table could not be read: ${reason}`,
  healthTimeout: (ms: number) => `no answer within ${ms} ms`,

  // `queuebox verify` (the dialects' part; lib/cli/verify/verify.messages.ts holds the rest)
  verifySessionIdInvalid: (session: unknown) => `not a session id this database hands out: ${show(session)}`,
} as const;
