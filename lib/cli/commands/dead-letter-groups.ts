import type { DeadLetterGroupRow } from '../../dialects/dialect-rows';
import type { QueueTable } from '../../types/claims';
import { formatTable, formatTime } from '../table';

/** Dead-letter groups as a table: count, first and last death, destination or source, then the fingerprint on a line of its own. */
export function formatDeadLetterGroups(component: QueueTable, rows: DeadLetterGroupRow[]): string[] {
  if (rows.length === 0) return [`No dead ${component} rows.`];
  const header = ['count', 'first died', 'last died', component === 'outbox' ? 'destination' : 'source'];
  const table = rows.map((r) => [String(r.count), formatTime(r.firstDeadAt), formatTime(r.lastDeadAt), r.name]);
  const [head, ...formatted] = formatTable(header, table, [0]);
  const body = formatted.flatMap((line, i) => [
    line,
    `    fingerprint: ${rows[i].fingerprint ?? '(none: died before the attempts migration)'}`,
  ]);
  return [
    `Dead ${component} rows by cause, the biggest groups first:`,
    head,
    ...body,
    `${rows.length} group(s). Replay or discard one: queuebox dead-letters replay --component ${component} --name <name> --fingerprint '<fingerprint>'`,
  ];
}
