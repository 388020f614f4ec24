/**
 * Every text the dashboard throws, logs or answers with, in one place (as `queuebox.messages.ts`
 * for the rest of QueueBox). Values from users are shown with `show()`, never raw.
 */
const show = (value: unknown): string => {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  if (typeof value === 'object') return 'an object';
  return String(value);
};

const DOC = 'node_modules/queuebox/docs/dashboard.md';

export const dashboardMessages = {
  // The overview's flags (dashboard.flags.ts)
  flagLag: (component: string, name: string, seconds: number, threshold: number) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} lags: its oldest due message has waited ${Math.round(seconds)} s (threshold ${threshold} s).`,
  flagInstance: (state: string, id: string, host: string, pid: number, ageSeconds: number, claims: number) =>
    state === 'dead'
      ? `Instance ${id.slice(0, 8)} (${host}, pid ${pid}) is dead: no heartbeat for ${Math.round(ageSeconds)} s; its ${claims} claimed row(s) move again once a live replica ends its leases.`
      : `Instance ${id.slice(0, 8)} (${host}, pid ${pid}) is silent: no heartbeat for ${Math.round(ageSeconds)} s (missed two or more); it still holds ${claims} row(s).`,
  flagPaused: (component: string, name: string, by: string | null, at: Date | string, reason: string | null) =>
    `${component === 'outbox' ? 'Destination' : 'Source'} ${show(name)} is paused (by ${by ?? 'unknown'} at ${new Date(at).toISOString().replace(/\.\d{3}Z$/, 'Z')}${reason ? `: ${reason}` : ''}): claims skip its rows, in order, until it is resumed.`,
  flagDatabase: (errors: number, warnings: number, codes: readonly string[]) =>
    `The database has ${[errors > 0 ? `${errors} error${errors === 1 ? '' : 's'}` : '', warnings > 0 ? `${warnings} warning${warnings === 1 ? '' : 's'}` : ''].filter(Boolean).join(' and ')} (${codes.join(', ')}); each names its repair.`,
  flagUnavailable: (source: string, error: string) => `Could not check ${source}: ${error.slice(0, 200)}`,
  lagThresholdInvalid: (value: unknown) =>
    `QueueBoxDashboardModule option "lagThresholdSeconds" must be a number of seconds from 1 to 86400, got ${show(value)}.`,
  messagesUnavailable: () =>
    "This instance's admin has no findMessages() (a DashboardAdmin of your own): the message browser is not available.",
  historyUnavailable: () => "This instance's admin has no history() (a DashboardAdmin of your own): the history is not available.",
  messageNotFound: (component: string, id: string) => `No ${component} row with id ${show(id)} (it may have been deleted by retention).`,
  warningsUnavailable: () =>
    'This instance is an admin of its own, not a QueueBox of this app: no doctor examines its database here. Run `queuebox doctor` against it (docs/doctor.md).',
  noQueueBox: () =>
    'The dashboard found no QueueBox in this app: import QueueBoxModule.forRoot() (or QueueBoxTenantsModule), or give "instances" with a QueueBoxAdmin of each database (createQueueBoxAdmin(dataSource)).',
  // Options (QueueBoxConfigError, at start-up)
  optionsNotObject: (value: unknown) => `QueueBoxDashboardModule.forRoot() takes an options object, got ${show(value)}.`,
  optionUnknown: (option: string, known: readonly string[]) =>
    `Unknown QueueBoxDashboardModule option "${option}"; the options are ${known.map((k) => `"${k}"`).join(', ')}. See ${DOC}.`,
  guardMissing: () =>
    `QueueBoxDashboardModule refuses to start without a guard: the dashboard replays and discards messages. Pass "guard" (a Nest guard class or instance that authenticates operators, e.g. guard: AdminGuard), or "public: true" if something in front of the app (a VPN, an authenticating proxy) already restricts who reaches it. See ${DOC}.`,
  guardAndPublic: () =>
    'QueueBoxDashboardModule: "guard" and "public: true" contradict each other; keep the guard and drop "public", or drop the guard.',
  guardInvalid: (value: unknown) =>
    `QueueBoxDashboardModule option "guard" must be a Nest guard: a class implementing CanActivate or an object with a canActivate() method (or an array of them), got ${show(value)}.`,
  pathInvalid: (value: unknown) =>
    `QueueBoxDashboardModule option "path" must be a route path such as "queuebox" or "ops/queuebox" (letters, digits, ".", "_", "~", "-" between slashes), got ${show(value)}.`,
  booleanInvalid: (option: string, value: unknown) =>
    `QueueBoxDashboardModule option "${option}" must be true or false, got ${show(value)}.`,
  functionInvalid: (option: string, value: unknown) => `QueueBoxDashboardModule option "${option}" must be a function, got ${show(value)}.`,
  instancesInvalid: (value: unknown) =>
    `QueueBoxDashboardModule option "instances" must be a non-empty array of { name, admin }, where admin is a QueueBoxAdmin or its injection token; got ${show(value)}.`,
  noInstancesShown: () =>
    'QueueBoxDashboardModule: "appQueueBoxes: false" without "instances" leaves nothing to show; give "instances", or drop "appQueueBoxes".',
  instanceNameInvalid: (value: unknown) =>
    `QueueBoxDashboardModule: an instance name must be 1 to 64 letters, digits, ".", "_" or "-", got ${show(value)}.`,
  instanceNameRepeated: (name: string) => `QueueBoxDashboardModule: two instances are named ${show(name)}; give each its own name.`,
  instanceMissing: (name: string, token: string) =>
    `QueueBoxDashboardModule found no QueueBoxAdmin for instance ${show(name)} (token ${token}). Import QueueBoxModule.forRoot() in the application, or pass instances: [{ name, admin }] with a QueueBoxAdmin (createQueueBoxAdmin(dataSource)) or a provider token visible to the dashboard (add its module to "imports").`,
  allowedOriginsInvalid: (value: unknown) =>
    `QueueBoxDashboardModule option "allowedOrigins" must be an array of origins such as "https://ops.example.com" (scheme, host and port, no path), got ${show(value)}.`,
  tokenSecretInvalid: () =>
    'QueueBoxDashboardModule option "tokenSecret" must be a string of at least 32 characters (e.g. 32 random bytes in hex), shared by the replicas behind one URL.',
  assetsMissing: (dir: string) =>
    `QueueBoxDashboardModule: the dashboard's built files are missing from ${dir}. They are built with the package ("npm run build" in a checkout of QueueBox); an installed package ships them.`,

  // Answers (HTTP 4xx bodies)
  readOnly: () => 'This dashboard is read-only (readOnly: true): replay, discard and skip-head are refused. Nothing was changed.',
  crossSite: (site: string) =>
    `Refused: this request came from another site (Sec-Fetch-Site: ${show(site)}). Dashboard actions are accepted from the dashboard's own page only. Nothing was changed.`,
  originRefused: (origin: string) =>
    `Refused: the request's Origin ${show(origin)} is not this dashboard's. Behind a proxy that rewrites the Host header, list the public origin in "allowedOrigins". Nothing was changed.`,
  tokenRefused: (header: string) =>
    `Refused: the ${header} header is missing or wrong. Read the token from GET <dashboard>/api/session (it changes when the app restarts, unless "tokenSecret" is set) and send it with every action. Nothing was changed.`,
  bodyNotJson: () => 'The request body must be a JSON object, sent with Content-Type: application/json. Nothing was changed.',
  bodyNotJsonType: (contentType: string | undefined) =>
    `Refused: dashboard actions take a JSON body sent with Content-Type: application/json, and this one came ${contentType === undefined ? 'without a Content-Type' : `as ${show(contentType)}`}. Nothing was changed.`,
  instanceUnknown: (name: string, known: readonly string[]) =>
    `No QueueBox instance is named ${show(name)} here; the instances are ${known.map((k) => show(k)).join(', ')}.`,
  parameterInvalid: (name: string, rule: string, value: unknown) => `"${name}" ${rule}, got ${show(value)}.`,
  deadLetterNotFound: (component: string, id: string) =>
    `No dead ${component} row has id ${show(id)} (it may have been replayed, discarded or deleted by retention).`,
  selectionMissing: () =>
    'Say which dead rows: "ids" (an array of row ids) or "filter" ({ name, key, error, from, to }); a filter with no criterion also needs "all": true. Nothing was changed.',
  groupsUnavailable: () =>
    'This admin object has no deadLetterGroups() method (QueueBoxAdmin has): pass a QueueBoxAdmin to group dead letters by cause.',
  attemptsUnavailable: () =>
    'This admin object has no listAttempts() method (QueueBoxAdmin has): pass a QueueBoxAdmin to see each failed attempt.',
  heartbeatsUnavailable: () =>
    'This admin object has no instances() method (QueueBoxAdmin has): pass a QueueBoxAdmin to list the instances and their heartbeats.',
  pausesUnavailable: () =>
    'This admin object has no pauses(), pause() and resume() methods (QueueBoxAdmin has): pass a QueueBoxAdmin to see and change the paused destinations and sources.',

  // Log (context QueueBox:Dashboard)
  started: (path: string, instances: readonly string[], readOnly: boolean, isPublic: boolean) =>
    `Dashboard at /${path} (${instances.length === 1 ? `instance ${show(instances[0])}` : `instances ${instances.map(show).join(', ')}`}${readOnly ? ', read-only' : ''}${isPublic ? ', public: no guard' : ''}).`,
  action: (actor: string, action: string, instance: string, component: string, changed: number, selection: string) =>
    `${show(actor)} ${action} on instance ${show(instance)}, ${component}: ${selection}; ${changed} row(s) changed.`,
} as const;
