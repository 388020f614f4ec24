import type { InstanceRow, RowOwner } from '../dialects/dialect-rows';

/** Rows as aligned columns, two spaces apart, each line indented by two; `right` columns are right-aligned. */
export function formatTable(header: readonly string[], rows: readonly string[][], right: readonly number[] = []): string[] {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i].length)));
  const format = (row: readonly string[]) =>
    `  ${row.map((cell, i) => (right.includes(i) ? cell.padStart(widths[i]) : i === row.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')}`;
  return [format(header), ...rows.map(format)];
}

/** One line of at most `max` characters: whitespace runs (newlines included) collapsed, `…` when cut. */
export function oneLine(text: string | null, max: number): string {
  if (text === null) return '-';
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/**
 * A text as lines of at most `width` characters, broken at spaces (a longer word is split), whitespace
 * runs collapsed. Beyond `maxChars` the rest is cut, with `…` and how many characters were left out:
 * the head, where an error says what went wrong, is always shown whole.
 */
export function wrapText(text: string, width: number, maxChars: number): string[] {
  const flat = text.replace(/\s+/g, ' ').trim();
  const shown = flat.length <= maxChars ? flat : `${flat.slice(0, maxChars).trimEnd()} … (${flat.length - maxChars} more characters)`;
  const lines: string[] = [];
  let line = '';
  for (const word of shown.split(' ')) {
    if (line !== '' && line.length + 1 + word.length <= width) {
      line += ` ${word}`;
      continue;
    }
    if (line !== '') lines.push(line);
    line = word;
    while (line.length > width) {
      lines.push(line.slice(0, width));
      line = line.slice(width);
    }
  }
  if (line !== '' || lines.length === 0) lines.push(line);
  return lines;
}

/** An instant as ISO 8601 UTC to the second: `2026-11-30T14:03:07Z`. */
export function formatTime(time: Date | null): string {
  return time === null ? '-' : `${time.toISOString().slice(0, 19)}Z`;
}

/** Seconds as `4.2s`, `3m 05s`, `2h 07m`: how long something has been held or silent. */
export function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const s = Math.floor(seconds);
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${two(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${two(Math.floor((s % 3600) / 60))}m`;
}

/**
 * Who holds a row, shortened: the owner and its state while the row is held (`3f2a9c1e (alive)`,
 * `3f2a9c1e (SILENT)`, `3f2a9c1e (DEAD)`); for a row nobody holds, only the instance that claimed
 * it last, said as such (`none; last claimed by 3f2a9c1e`), or `-`.
 */
export function ownerText(row: RowOwner): string {
  if (row.owner !== null)
    return `${row.owner.slice(0, 8)} (${row.ownerState === 'alive' ? 'alive' : (row.ownerState ?? 'dead').toUpperCase()})`;
  return row.lastClaimedBy === null ? '-' : `none; last claimed by ${row.lastClaimedBy.slice(0, 8)}`;
}

/** An instance's state for a table: `alive`, `SILENT (dead after 15.0s)`, `DEAD (silent > 15.0s)`. */
export function instanceStateText(row: Pick<InstanceRow, 'state' | 'deadAfterMs'>): string {
  const deadAfter = formatSeconds(row.deadAfterMs / 1000);
  if (row.state === 'silent') return `SILENT (dead after ${deadAfter})`;
  return row.state === 'dead' ? `DEAD (silent > ${deadAfter})` : 'alive';
}
