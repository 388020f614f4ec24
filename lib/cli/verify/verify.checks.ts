import { verifyMessages as say } from './verify.messages';
import type { VerifyPath, VerifyScenario } from './verify.options';
import type { Delivery, FaultRecord, HeldRow, Leftover, ProducedMessage, RowState } from './verify.records';

// The checks of a verify run: pure functions of what the run recorded. Each returns one line of
// the report (PASS, FAIL or SKIP with its figure) and, when it fails, a message per failure.

export type VerifyCheckName = 'lost' | 'duplicates' | 'order' | 'stuck' | 'poison' | 'recovery' | 'shutdown' | 'paused';

export type VerifyCheckStatus = 'PASS' | 'FAIL' | 'SKIP';

/** One line of the report. */
export interface VerifyCheck {
  name: VerifyCheckName;
  status: VerifyCheckStatus;
  /** What was measured, in words, with its numbers. */
  figure: string;
  /** One message per failure (empty unless FAIL). */
  failures: string[];
}

/** Everything the checks read. */
export interface CheckInput {
  produced: readonly ProducedMessage[];
  deliveries: readonly Delivery[];
  faults: readonly FaultRecord[];
  /** Each produced message's row at the end, by message name. */
  states: ReadonlyMap<string, RowState>;
  /** Destinations and sources with rows still unfinished after the drain. */
  leftovers: readonly Leftover[];
  drain: { drained: boolean; ms: number; boundMs: number };
  scenarios: readonly VerifyScenario[];
  leaseMs: number;
  maxAttempts: number;
  /** How soon after a kill the keys it held must move again. */
  recoveryBoundMs: number;
  /** How long a graceful shutdown may take before it is killed. */
  shutdownBoundMs: number;
}

const check = (name: VerifyCheckName, failures: string[], figure: string): VerifyCheck => ({
  name,
  status: failures.length > 0 ? 'FAIL' : 'PASS',
  figure,
  failures,
});

const skip = (name: VerifyCheckName, figure: string): VerifyCheck => ({ name, status: 'SKIP', figure, failures: [] });

const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** Deliveries by message name, in receipt order. */
function deliveriesByName(deliveries: readonly Delivery[]): Map<string, Delivery[]> {
  const byName = new Map<string, Delivery[]>();
  for (const delivery of deliveries) {
    const list = byName.get(delivery.name);
    if (list) list.push(delivery);
    else byName.set(delivery.name, [delivery]);
  }
  for (const list of byName.values()) list.sort((a, b) => a.seq - b.seq);
  return byName;
}

/** Every message that is not poison reached the destination at least once. */
export function lostCheck(input: CheckInput): VerifyCheck {
  const delivered = new Set(input.deliveries.map((delivery) => delivery.name));
  const expected = input.produced.filter((message) => !message.poison);
  const failures = expected
    .filter((message) => !delivered.has(message.name))
    .map((message) => say.checkLost(message.name, message.path === 'outbox' ? 'outbox' : 'inbox', input.states.get(message.name)));
  return check('lost', failures, say.figureLost(failures.length, expected.length));
}

/**
 * A fault that explains a message delivered more than once: one of its delivering workers was
 * killed, paused, cut off from the database, shut down or crashed while the message was in its
 * hands (from a lease before its first copy was sent to its last copy).
 */
export function explanationOf(copies: readonly Delivery[], faults: readonly FaultRecord[], leaseMs: number): FaultRecord | undefined {
  const workers = new Set(copies.map((copy) => copy.worker));
  const from = Math.min(...copies.map((copy) => copy.sentAt)) - leaseMs;
  const to = Math.max(...copies.map((copy) => copy.sentAt));
  return faults.find((fault) => workers.has(fault.worker) && fault.at <= to && fault.endedAt >= from);
}

/**
 * At least once, duplicates explained: a message published again under its message id needs a
 * fault that explains it; a message that reached the outbox under two message ids (a pull
 * handler's transaction or a relay forward committed twice, I3 and I6) is never explained.
 */
export function duplicatesCheck(input: CheckInput): VerifyCheck {
  const failures: string[] = [];
  const causes = new Map<string, number>();
  let redeliveries = 0;
  let twice = 0;
  for (const [name, copies] of deliveriesByName(input.deliveries)) {
    if (copies.length < 2) continue;
    const byMessageId = new Map<string, Delivery[]>();
    for (const copy of copies) byMessageId.set(copy.messageId, [...(byMessageId.get(copy.messageId) ?? []), copy]);
    if (byMessageId.size > 1) {
      twice++;
      failures.push(say.checkHandledTwice(name, copies[0].path, byMessageId.size));
    }
    for (const same of byMessageId.values()) {
      if (same.length < 2) continue;
      redeliveries += same.length - 1;
      const cause = explanationOf(same, input.faults, input.leaseMs);
      if (cause) causes.set(cause.kind, (causes.get(cause.kind) ?? 0) + same.length - 1);
      else
        failures.push(
          say.checkUnexplained(
            name,
            same.map((copy) => copy.worker),
          ),
        );
    }
  }
  const explained = [...causes.values()].reduce((sum, n) => sum + n, 0);
  return check('duplicates', failures, say.figureDuplicates(redeliveries, explained, [...causes], twice));
}

/** A message's first delivery (its receipt order), by name. */
function firstDeliveries(deliveries: readonly Delivery[]): Map<string, number> {
  const first = new Map<string, number>();
  for (const delivery of deliveries) {
    const seen = first.get(delivery.name);
    if (seen === undefined || delivery.seq < seen) first.set(delivery.name, delivery.seq);
  }
  return first;
}

/**
 * I4 at the destination: for two messages of one key where the first had committed before the
 * second was produced, the first was delivered first (first deliveries; a poison or lost message
 * has none and is left out). Per key, the messages sorted by commit: for each message, the latest
 * first delivery among those committed before it was produced must come before its own.
 */
export function orderCheck(input: CheckInput): VerifyCheck {
  const first = firstDeliveries(input.deliveries);
  const byKey = new Map<string, { message: ProducedMessage; first: number }[]>();
  for (const message of input.produced) {
    const at = first.get(message.name);
    if (message.key === null || message.poison || at === undefined) continue;
    const id = `${message.path}\u0000${message.key}`;
    byKey.set(id, [...(byKey.get(id) ?? []), { message, first: at }]);
  }
  const failures: string[] = [];
  let pairs = 0;
  for (const entries of byKey.values()) {
    entries.sort((a, b) => a.message.committed - b.message.committed);
    const committed = entries.map((entry) => entry.message.committed);
    const latest: { first: number; name: string }[] = [];
    for (const entry of entries) {
      const before = latest[latest.length - 1];
      latest.push(before && before.first > entry.first ? before : { first: entry.first, name: entry.message.name });
    }
    for (const entry of entries) {
      const count = countBelow(committed, entry.message.started);
      pairs += count;
      const culprit = count > 0 ? latest[count - 1] : undefined;
      if (culprit && culprit.first > entry.first) failures.push(say.checkOutOfOrder(entry.message.name, culprit.name));
    }
  }
  return check('order', failures, say.figureOrder(failures.length, pairs, byKey.size));
}

/** How many of the sorted `values` are below `limit`. */
function countBelow(values: readonly number[], limit: number): number {
  let low = 0;
  let high = values.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (values[middle] < limit) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** No row left pending or processing once the run drained (a row held by no live owner is the worst kind). */
export function stuckCheck(input: CheckInput): VerifyCheck {
  const failures = input.leftovers
    .filter((row) => row.pending > 0 || row.processing > 0)
    .map((row) => say.checkStuck(row.component, row.name, row.pending, row.processing, row.ownerless));
  const figure = input.drain.drained
    ? say.figureDrained(seconds(input.drain.ms), seconds(input.drain.boundMs))
    : say.figureNotDrained(
        input.leftovers.reduce((sum, row) => sum + row.pending, 0),
        input.leftovers.reduce((sum, row) => sum + row.processing, 0),
        input.leftovers.reduce((sum, row) => sum + row.ownerless, 0),
        seconds(input.drain.boundMs),
      );
  return check('stuck', failures, figure);
}

/**
 * I8: every poison message ended `dead` within `maxAttempts` attempts, and was never delivered.
 * A row whose last attempt ended with an expired lease (its worker killed or paused) is marked dead
 * by the claim that would have been attempt `maxAttempts + 1`, which counts it: that many is allowed.
 */
export function poisonCheck(input: CheckInput): VerifyCheck {
  const poison = input.produced.filter((message) => message.poison);
  if (!input.scenarios.includes('poison') || poison.length === 0) return skip('poison', say.figureNotRun('poison'));
  const delivered = new Set(input.deliveries.map((delivery) => delivery.name));
  const failures: string[] = [];
  for (const message of poison) {
    const state = input.states.get(message.name);
    if (delivered.has(message.name)) failures.push(say.checkPoisonDelivered(message.name));
    else if (state?.state !== 'dead' || state.attempts > input.maxAttempts + 1) failures.push(say.checkPoisonNotDead(message.name, state));
  }
  return check('poison', failures, say.figurePoison(poison.length - failures.length, poison.length, input.maxAttempts));
}

/**
 * After each kill -9, how long until the keys the killed worker held were delivered again (a
 * held row without a key: until that message was). A held poison message is left out: it dies.
 * A row of a destination or source an admin pause held at the kill waits for the resume: its
 * time counts from the resume.
 */
export function recoveryCheck(input: CheckInput): VerifyCheck {
  const kills = input.faults.filter((fault) => fault.kind === 'kill');
  if (!input.scenarios.includes('kill')) return skip('recovery', say.figureNotRun('kill'));
  const poison = new Set(input.produced.filter((m) => m.poison).map((m) => m.name));
  const nameOfMessageId = new Map<string, string>();
  for (const message of input.produced) if (message.messageId) nameOfMessageId.set(message.messageId, message.name);
  for (const delivery of input.deliveries) nameOfMessageId.set(delivery.messageId, delivery.name);
  const nameOf = (row: HeldRow) => row.idempotencyKey ?? (row.messageId ? nameOfMessageId.get(row.messageId) : undefined);
  const failures: string[] = [];
  let worst = 0;
  let worstKey = '';
  let keys = 0;
  const resumeOf = (row: HeldRow, at: number) =>
    Math.max(
      at,
      ...input.faults
        .filter((fault) => fault.kind === 'admin-pause' && fault.at <= at && fault.endedAt >= at)
        .filter((fault) => fault.paused?.some((paused) => paused.component === row.component && paused.name === row.name))
        .map((fault) => fault.endedAt),
    );
  for (const kill of kills) {
    for (const row of kill.held) {
      const name = nameOf(row);
      if (name !== undefined && poison.has(name)) continue;
      keys++;
      const next = input.deliveries.find(
        (delivery) => delivery.receivedAt > kill.at && (row.key !== null ? delivery.key === row.key : delivery.name === name),
      );
      if (!next) {
        failures.push(say.checkNotRecovered(kill.worker, row.key ?? name ?? '?'));
        continue;
      }
      const ms = Math.max(0, next.receivedAt - resumeOf(row, kill.at));
      if (ms > worst) {
        worst = ms;
        worstKey = row.key ?? name ?? '?';
      }
      if (ms > input.recoveryBoundMs)
        failures.push(say.checkRecoveredLate(kill.worker, row.key ?? name ?? '?', seconds(ms), seconds(input.recoveryBoundMs)));
    }
  }
  return check('recovery', failures, say.figureRecovery(kills.length, keys, seconds(worst), worstKey, seconds(input.recoveryBoundMs)));
}

/** I9: each graceful shutdown ended by itself within its bound and left no claim held by its instance. */
export function shutdownCheck(input: CheckInput): VerifyCheck {
  if (!input.scenarios.includes('shutdown')) return skip('shutdown', say.figureNotRun('shutdown'));
  const shutdowns = input.faults.filter((fault) => fault.kind === 'shutdown');
  const failures: string[] = [];
  for (const shutdown of shutdowns) {
    if (shutdown.exitedInTime === false) failures.push(say.checkShutdownOverran(shutdown.worker, seconds(input.shutdownBoundMs)));
    if ((shutdown.leftHeld ?? 0) > 0) failures.push(say.checkShutdownLeftHeld(shutdown.worker, shutdown.leftHeld ?? 0));
  }
  const longest = Math.max(0, ...shutdowns.map((fault) => fault.endedAt - fault.at));
  const leftHeld = shutdowns.reduce((sum, fault) => sum + (fault.leftHeld ?? 0), 0);
  return check('shutdown', failures, say.figureShutdown(shutdowns.length, seconds(longest), seconds(input.shutdownBoundMs), leftHeld));
}

/**
 * Each admin pause held: no row of a paused destination or source was claimed from the moment the
 * pause had taken effect to the resume (beyond the keys in flight then). That the paused rows then
 * went out, in order, is the lost, order and stuck checks' to say.
 */
export function pausedCheck(input: CheckInput): VerifyCheck {
  if (!input.scenarios.includes('admin-pause')) return skip('paused', say.figureNotRun('admin-pause'));
  const pauses = input.faults.filter((fault) => fault.kind === 'admin-pause');
  const names = pauses.flatMap((fault) => fault.paused ?? []);
  const failures = names
    .filter((paused) => paused.claimedKeys.length > 0)
    .map((paused) => say.checkClaimedWhilePaused(paused.component, paused.name, paused.claimedKeys));
  // The names of one pause are watched over the same time.
  const watched = pauses.reduce((sum, fault) => sum + Math.max(0, ...(fault.paused ?? []).map((paused) => paused.watchedMs)), 0);
  const claimed = names.reduce((sum, paused) => sum + paused.claimedKeys.length, 0);
  return check('paused', failures, say.figurePaused(pauses.length, names.length, seconds(watched), claimed));
}

/** Every check, in report order. */
export function runChecks(input: CheckInput): VerifyCheck[] {
  return [lostCheck, duplicatesCheck, orderCheck, stuckCheck, poisonCheck, recoveryCheck, shutdownCheck, pausedCheck].map((run) =>
    run(input),
  );
}

/** Pairs of one key whose rows committed out of production order (a later-started one committed first): the run made them. */
export function outOfOrderCommits(produced: readonly ProducedMessage[]): number {
  const byKey = new Map<string, ProducedMessage[]>();
  for (const message of produced) {
    if (message.key === null) continue;
    const id = `${message.path}\u0000${message.key}`;
    byKey.set(id, [...(byKey.get(id) ?? []), message]);
  }
  let pairs = 0;
  for (const messages of byKey.values()) {
    // Sorted by start: a pair is out of order when the later-started one committed first.
    messages.sort((a, b) => a.started - b.started);
    for (let i = 0; i < messages.length; i++) {
      for (let j = i + 1; j < messages.length && messages[j].started < messages[i].committed; j++) {
        if (messages[j].committed < messages[i].committed) pairs++;
      }
    }
  }
  return pairs;
}

/** The paths' message counts, for the report. */
export function countByPath(produced: readonly ProducedMessage[]): Record<VerifyPath, number> {
  const counts: Record<VerifyPath, number> = { outbox: 0, relay: 0, pull: 0, batch: 0 };
  for (const message of produced) counts[message.path]++;
  return counts;
}
