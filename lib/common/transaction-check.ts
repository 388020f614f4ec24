import type { EntityManager } from 'typeorm';
import { TransactionLostError, TransactionRequiredError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';

/**
 * Refuses a manager whose writes would not belong to a transaction: its connection is gone
 * (`TransactionLostError`), or it has none (`TransactionRequiredError`, unless `allowAutocommit`).
 * Without the check, `enqueue(dataSource.manager, ...)` commits the message at once, whatever
 * happens to the business change it was meant to go with.
 */
export function checkTransaction(manager: unknown, call: 'enqueue' | 'receive', allowAutocommit: boolean): void {
  // Whatever was given (null, a number, an object that is no manager) is read without throwing a TypeError.
  const runner = typeof manager === 'object' && manager !== null ? (manager as Partial<EntityManager>).queryRunner : undefined;
  if (runner?.isReleased) throw new TransactionLostError(messages.transactionLost());
  if (!allowAutocommit && !runner?.isTransactionActive) throw new TransactionRequiredError(messages.transactionRequired(call));
}
