import { DEFAULT_QUEUEBOX } from './queuebox.constants';

/**
 * The logger context of one QueueBox's part: `QueueBox:OutboxPoller` for the default QueueBox
 * (unchanged, so existing log filters keep matching), `QueueBox:OutboxPoller:ledger` for one
 * named `ledger` or a tenant attached as `ledger`, so a line of an app with several databases
 * says which one it is about.
 *
 * @example
 * new Logger(logContext('QueueBox:OutboxPoller', identity.name))
 */
export function logContext(context: string, queuebox: string | undefined): string {
  return queuebox === undefined || queuebox === DEFAULT_QUEUEBOX ? context : `${context}:${queuebox}`;
}
