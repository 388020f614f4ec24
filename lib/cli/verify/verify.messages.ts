// Every line `queuebox verify` prints or throws, in one place.

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const list = (values: readonly string[]) => values.map((value) => JSON.stringify(value)).join(', ');
/** A row's end state as the checks print it (a `RowState` of verify.records; messages import nothing of the run). */
type RowState = { state: string; attempts: number; lastError: string | null };

const stateOf = (state: RowState | undefined) =>
  state === undefined
    ? 'not found'
    : `${state.state} after ${plural(state.attempts, 'attempt')}${state.lastError ? ` (${state.lastError.slice(0, 200)})` : ''}`;

export const verifyMessages = {
  // Options
  urlMissing: () => 'no database URL: pass --url, or set QUEUEBOX_DATABASE_URL or DATABASE_URL.',
  integerInvalid: (name: string, value: unknown, min: number, max: number) =>
    `${name} must be an integer from ${min} to ${max}; got ${JSON.stringify(value)}.`,
  scenarioUnknown: (value: string, known: readonly string[]) => `unknown scenario ${JSON.stringify(value)}: use ${list(known)} (or none).`,
  defectUnknown: (value: string, known: readonly string[]) =>
    `QUEUEBOX_VERIFY_DEFECT=${JSON.stringify(value)} names no defect: use ${list(known)} (a self-test of verify; leave it unset for a real run).`,
  prefixInvalid: (value: unknown) =>
    `prefix ${JSON.stringify(value)} must be lower-case letters, digits and underscores (at most 31), starting with a letter or an underscore.`,
  schemaInvalid: (value: unknown) => `schema ${JSON.stringify(value)} must be a plain identifier (letters, digits, underscores).`,
  deadAfterTooShort: (deadAfterMs: number, heartbeatMs: number) =>
    `deadAfterMs (${deadAfterMs}) must be at least two heartbeats (heartbeatMs ${heartbeatMs}): a live worker would be declared dead.`,

  // Set-up and tear-down
  tablesHoldRows: (tables: string, rows: number) =>
    `${tables} already exist and hold ${plural(rows, 'row')}: another verify run is using them, or one was killed before it could drop them. Nothing was changed. Pass --force to drop them and start over, or --prefix for tables of another name.`,
  tablesNotDropped: (tables: string, reason: string) =>
    `Could not drop ${tables}: ${reason}. Drop them by hand, or run again with --force.`,
  workerNotReady: (name: string, how: string, output: string) =>
    `worker ${name} did not start (${how})${output ? `; its last lines:\n${output}` : ''}`,
  workerConfigMissing: (variable: string) => `the verify worker needs ${variable} (it is started by queuebox verify, not by hand).`,
  interruptedError: () => 'queuebox verify was interrupted',
  interrupted: (dropped: boolean) =>
    `interrupted: the workers were stopped${dropped ? ' and the tables dropped' : '; the tables were NOT dropped (see above): run again with --force'}.`,

  // Progress
  starting: (version: string, database: string, where: string) => `queuebox verify ${version} on ${database} (${where})`,
  defectBanner: (defect: string) =>
    `SELF-TEST: defect "${defect}" injected into the workers (QUEUEBOX_VERIFY_DEFECT): this run must FAIL. It says nothing about your database.`,
  settingsLine: (label: string, values: string) => `${label}: ${values}`,
  workersStarted: (count: number, ms: number) => `Started ${plural(count, 'worker')} in ${(ms / 1000).toFixed(1)} s.`,
  producing: (seconds: number, rate: number, scenarios: string) => `Producing for ${seconds} s at ${rate} msg/s; scenarios: ${scenarios}.`,
  faultDone: (fault: string, worker: string, detail: string) => `  ${fault} ${worker}${detail ? `: ${detail}` : ''}`,
  faultSkipped: (fault: string, reason: string) => `  ${fault} skipped: ${reason}`,
  adminPauseDone: (names: readonly string[], seconds: string, claimed: number) =>
    `  admin pause of ${names.join(' and ')}: ${seconds} s, ${plural(claimed, 'row')} claimed while paused`,
  workerCrashed: (worker: string, how: string) => `  worker ${worker} exited by itself (${how}); started another`,
  draining: () => 'Production over; waiting for every row to finish.',
  produced: (total: number, byPath: string, poison: number, outOfOrder: number) =>
    `Produced ${plural(total, 'message')} (${byPath}; ${poison} poison), ${plural(outOfOrder, 'pair')} of one key committed out of production order.`,
  faultsLine: (faults: string) => `Faults: ${faults}.`,
  workerWarning: (warning: string, workers: readonly string[]) => `NOTE  ${workers.join(', ')} printed: ${warning}`,
  checkLine: (status: string, name: string, figure: string) => `${status.padEnd(4)}  ${name.padEnd(10)}  ${figure}`,
  failureLine: (message: string) => `        - ${message}`,
  moreFailures: (count: number, file: string | undefined) =>
    `        ... and ${count} more${file ? ` (every one in ${file})` : ' (pass --json <file> for every one)'}`,
  verdict: (verdict: string, checks: number, seconds: string, dropped: boolean) =>
    `Verdict: ${verdict} (${plural(checks, 'check')}) in ${seconds} s.${dropped ? ' Workers stopped, tables dropped.' : ''}`,

  // Faults that cannot run
  sessionsNotAllowed: (missing: string) => `this login may not ${missing}, which ending another session needs.`,
  sessionsNotFound: (name: string) =>
    `no database session named ${JSON.stringify(name)} was found: a connection pooler between verify and the database (PgBouncer, a proxy) hides the workers' own sessions.`,
  sessionsFailed: (reason: string) => `ending a session failed: ${reason}`,
  faultNoWorker: () => 'no live worker to inject it into',
  faultNeedsSignals: (signal: string) => `it needs ${signal} as Linux and macOS deliver it; Windows does not.`,

  // Checks
  checkLost: (name: string, table: string, state: RowState | undefined) =>
    `${name} was never delivered; its ${table} row is ${stateOf(state)}`,
  figureLost: (lost: number, total: number) => `${lost} of ${plural(total, 'message')} lost (never delivered)`,
  checkHandledTwice: (name: string, path: string, rows: number) =>
    path === 'relay'
      ? `${name} was forwarded ${rows} times by the relay (${rows} outbox rows for one inbox message: I6)`
      : path === 'outbox'
        ? `${name} reached the destination under ${rows} message ids`
        : `${name} was handled ${rows} times: its ${path} handler's transaction committed ${rows} times (a lost claim must roll it back: I3)`,
  checkUnexplained: (name: string, workers: readonly string[]) =>
    `${name} was delivered ${workers.length} times (by ${workers.join(', ')}) with no kill, pause, ended session or shutdown of those workers to explain it`,
  figureDuplicates: (redeliveries: number, explained: number, causes: [string, number][], twice: number) =>
    `${plural(redeliveries, 'redelivery', 'redeliveries')}, ${explained} explained${
      causes.length > 0 ? ` (${causes.map(([cause, n]) => `${cause} ${n}`).join(', ')})` : ''
    }, ${redeliveries - explained} unexplained; ${plural(twice, 'message')} handled or forwarded twice`,
  checkOutOfOrder: (later: string, earlier: string) =>
    `${later} was first delivered before ${earlier}, which had committed before ${later} was produced (I4)`,
  figureOrder: (violations: number, pairs: number, keys: number) =>
    `${violations} of ${plural(pairs, 'pair')} of one key out of order (first deliveries, ${plural(keys, 'key')})`,
  checkStuck: (component: string, name: string, pending: number, processing: number, ownerless: number) =>
    `${component} ${JSON.stringify(name)}: ${pending} pending, ${processing} processing (${ownerless} with no live owner) after the drain`,
  figureDrained: (seconds: string, bound: string) => `every row finished ${seconds} s after production ended (bound ${bound} s)`,
  figureNotDrained: (pending: number, processing: number, ownerless: number, bound: string) =>
    `${pending} pending and ${processing} processing rows (${ownerless} with no live owner) ${bound} s after production ended`,
  checkPoisonDelivered: (name: string) => `poison message ${name} was delivered`,
  checkPoisonNotDead: (name: string, state: RowState | undefined) => `poison message ${name} is ${stateOf(state)}`,
  figurePoison: (dead: number, total: number, maxAttempts: number) =>
    `${dead} of ${plural(total, 'poison message')} dead within ${maxAttempts} attempts, never delivered`,
  figureNotRun: (scenario: string) => `scenario ${scenario} not run`,
  checkNotRecovered: (worker: string, key: string) => `key ${key}, held by ${worker} when it was killed, was never delivered again`,
  checkRecoveredLate: (worker: string, key: string, seconds: string, bound: string) =>
    `key ${key}, held by ${worker} when it was killed, was delivered again ${seconds} s later (bound ${bound} s)`,
  figureRecovery: (kills: number, keys: number, worst: string, worstKey: string, bound: string) =>
    `after ${plural(kills, 'kill')}, the ${plural(keys, 'claim')} the killed workers held moved again within ${worst} s${
      worstKey ? ` (slowest: ${worstKey})` : ''
    } (bound ${bound} s)`,
  checkShutdownOverran: (worker: string, bound: string) => `graceful shutdown of ${worker} did not end within ${bound} s: it was killed`,
  checkShutdownLeftHeld: (worker: string, held: number) =>
    `graceful shutdown of ${worker} left ${plural(held, 'row')} held under a live lease of its instance (its deregistration must end them: I9)`,
  figureShutdown: (count: number, longest: string, bound: string, leftHeld: number) =>
    `${plural(count, 'graceful shutdown')} with work in flight, the longest ${longest} s (bound ${bound} s); ${plural(leftHeld, 'row')} left under a live lease after them`,

  checkClaimedWhilePaused: (component: string, name: string, keys: readonly (string | null)[]) =>
    `${component === 'outbox' ? 'destination' : 'source'} ${JSON.stringify(name)} was paused, yet ${plural(keys.length, 'row')} of it ${
      keys.length === 1 ? 'was' : 'were'
    } claimed (keys ${keys
      .slice(0, 5)
      .map((key) => key ?? 'none')
      .join(', ')}${keys.length > 5 ? ', ...' : ''})`,
  figurePaused: (pauses: number, names: number, seconds: string, claimed: number) =>
    `${plural(pauses, 'admin pause')} of ${plural(names, 'destination or source', 'destinations or sources')}, watched ${seconds} s: ${plural(claimed, 'row')} claimed while paused`,

  // Worker
  destinationRefused: (name: string) => `the verify destination refused ${name} (its first attempt fails on purpose)`,
  poisonRefused: (name: string) => `${name} is a poison message: it fails on every attempt, on purpose`,
  destinationGone: () => 'the verify run is gone (its IPC channel closed)',
};
