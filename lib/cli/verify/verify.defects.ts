import type { CompletedIds, Dialect } from '../../dialects/dialect';
import type { VerifyDefect } from './verify.options';

// The self-test of `queuebox verify`: a defect put into the verify's own worker processes (never
// into QueueBox's code paths) by wrapping the methods of the Dialect instance QueueBox creates,
// as Nest hands it over (the worker's `instrument.instanceDecorator`). A run with a defect must
// fail, and with the check the defect breaks. Set by `QUEUEBOX_VERIFY_DEFECT=<name>`.

const ALL_COMPLETED: CompletedIds = { has: () => true };

/** The expiry a renewal that did not run (or lost the row) reports as if it had renewed. */
const fakeExpiry = (leaseMs: number) => new Date(Date.now() + leaseMs);

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
    leaseRenewBatch: dialect.leaseRenewBatch.bind(dialect),
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
      dialect.leaseRenewBatch = async (p) => {
        const renewed = new Map((await original.leaseRenewBatch(p)).map((claim) => [claim.id, claim]));
        return p.claims.map(
          (claim) => renewed.get(claim.id) ?? { id: claim.id, token: claim.token, leaseExpiresAt: fakeExpiry(claim.leaseMs) },
        );
      };
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
      // Both ways a renewal goes: alone (the outbox poller, the relay), and batched on the pull
      // worker's set-aside connection.
      dialect.leaseRenew = async (p) => fakeExpiry(p.leaseMs);
      dialect.leaseRenewBatch = async (p) =>
        p.claims.map((claim) => ({ id: claim.id, token: claim.token, leaseExpiresAt: fakeExpiry(claim.leaseMs) }));
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
    case 'pauses-off':
      // The workers' claims read the pauses through this (ClaimPauses): they see none.
      dialect.pauseList = async () => [];
      return dialect;
  }
}
