import type { CompletedIds, Dialect } from '../../dialects/dialect';
import type { VerifyDefect } from './verify.options';

// The self-test of `queuebox verify`: a defect put into the verify's own worker processes (never
// into QueueBox's code paths) by wrapping the methods of the Dialect instance QueueBox creates,
// as Nest hands it over (the worker's `instrument.instanceDecorator`). A run with a defect must
// fail, and with the check the defect breaks. Set by `QUEUEBOX_VERIFY_DEFECT=<name>`.

const ALL_COMPLETED: CompletedIds = { has: () => true };

/** Whether `instance` is a QueueBox `Dialect` (what the decorator looks for among Nest's providers). */
export function isDialect(instance: unknown): instance is Dialect {
  const candidate = instance as Partial<Dialect> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.leaseRenew === 'function' &&
    typeof candidate.outboxClaimBatch === 'function' &&
    typeof candidate.inboxFollowers === 'function'
  );
}

/** Puts `defect` into `dialect` (its own methods replaced on the instance) and returns it. */
export function injectDefect(dialect: Dialect, defect: VerifyDefect): Dialect {
  const original = {
    leaseComplete: dialect.leaseComplete.bind(dialect),
    leaseCompleteBatch: dialect.leaseCompleteBatch.bind(dialect),
    inboxCompleteFollowers: dialect.inboxCompleteFollowers.bind(dialect),
    leaseRenew: dialect.leaseRenew.bind(dialect),
    leaseRetry: dialect.leaseRetry.bind(dialect),
    leaseDeadLetter: dialect.leaseDeadLetter.bind(dialect),
    inboxFollowers: dialect.inboxFollowers.bind(dialect),
  };
  switch (defect) {
    case 'fence-off':
      // The statements still run; their answer is ignored, as a fence that matched any row would be.
      dialect.leaseComplete = async (p) => {
        await original.leaseComplete(p);
        return true;
      };
      dialect.leaseCompleteBatch = async (p) => {
        await original.leaseCompleteBatch(p);
        return ALL_COMPLETED;
      };
      dialect.inboxCompleteFollowers = async (p) => {
        await original.inboxCompleteFollowers(p);
        return new Set(p.followers.map((follower) => follower.id));
      };
      dialect.leaseRenew = async (p) => (await original.leaseRenew(p)) ?? new Date(Date.now() + p.leaseMs);
      dialect.leaseRetry = async (p) => {
        await original.leaseRetry(p);
        return true;
      };
      dialect.leaseDeadLetter = async (p) => {
        await original.leaseDeadLetter(p);
        return true;
      };
      return dialect;
    case 'renewal-off':
      dialect.leaseRenew = async (p) => new Date(Date.now() + p.leaseMs);
      return dialect;
    case 'followers-skip':
      dialect.inboxFollowers = async (p) => {
        const rows = await original.inboxFollowers(p);
        // The row right behind each head: the lowest id read for it.
        const first = new Map<string, bigint>();
        for (const row of rows) {
          const id = BigInt(row.message.id);
          const seen = first.get(row.headId);
          if (seen === undefined || id < seen) first.set(row.headId, id);
        }
        return rows.filter((row) => first.get(row.headId) !== BigInt(row.message.id));
      };
      return dialect;
  }
}
