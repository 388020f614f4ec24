// Click a column header to sort a table by it (again: the other way). Client-side, on the rows
// shown: a cell sorts by its `data-sort` value when it has one (times, durations), else by its
// text, as a number when every non-empty cell of the column reads as one.

const collator = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

function cellValue(row: HTMLTableRowElement, column: number): string {
  const cell = row.cells[column];
  if (!cell) return '';
  return cell.dataset.sort ?? (cell.textContent ?? '').trim();
}

const asNumber = (text: string) => (text === '' || text === '—' ? Number.NaN : Number(text.replace(/[,\s]/g, '')));

/** The sort chosen per table (by its headers), kept while the page lives: a view that redraws every 5 s keeps it. */
const chosen = new Map<string, { column: number; ascending: boolean }>();

/**
 * Makes each header of `table` (but empty ones and checkboxes) a button that sorts the body's rows
 * by its column; a table with the same headers drawn again is sorted the same way.
 */
export function sortable(table: HTMLTableElement): HTMLTableElement {
  const headers = [...(table.tHead?.rows[0]?.cells ?? [])];
  const body = table.tBodies[0];
  if (!body) return table;
  const key = headers.map((th) => (th.textContent ?? '').trim()).join('|');
  const sortBy = (th: HTMLTableCellElement, column: number, ascending: boolean) => {
    for (const other of headers) other.removeAttribute('aria-sort');
    th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
    chosen.set(key, { column, ascending });
    const rows = [...body.rows];
    const values = rows.map((row) => cellValue(row, column));
    const numeric = values.every((v) => v === '' || v === '—' || !Number.isNaN(asNumber(v)));
    const order = rows
      .map((row, i) => ({ row, value: values[i] }))
      .sort((a, b) => {
        const d = numeric ? (asNumber(a.value) || 0) - (asNumber(b.value) || 0) : collator.compare(a.value, b.value);
        return ascending ? d : -d;
      });
    body.append(...order.map((o) => o.row));
  };
  headers.forEach((th, column) => {
    const label = (th.textContent ?? '').trim();
    if (label === '' || th.classList.contains('check')) return;
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'sort';
    button.textContent = label;
    th.replaceChildren(button);
    button.addEventListener('click', () => sortBy(th, column, th.getAttribute('aria-sort') !== 'ascending'));
  });
  const previous = chosen.get(key);
  if (previous && headers[previous.column]) sortBy(headers[previous.column], previous.column, previous.ascending);
  return table;
}
