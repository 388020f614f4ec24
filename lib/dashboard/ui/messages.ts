// The message browser: rows of any state of either table, found by the filters of
// QueueBoxAdmin.findMessages, newest first, a page at a time; and one row's detail.
import { get } from './api.js';
import { type Child, h, mount, time } from './dom.js';
import { sortable } from './sort.js';
import { api, BROWSER_ZONE, componentTabs, errorText, heading, table, toIso, toLocal, type ViewContext } from './view-parts.js';

type Component = 'outbox' | 'inbox';

interface MessageRow {
  component: Component;
  id: string;
  messageId: string | null;
  idempotencyKey: string | null;
  name: string;
  key: string | null;
  state: string;
  attempts: number;
  lastError: string | null;
  createdAt: string;
  availableAt: string;
  claimedAt: string | null;
  finishedAt: string | null;
  headers: Record<string, string>;
  payload?: unknown;
  traceId?: string | null;
}

interface Page {
  rows: MessageRow[];
  next: string | null;
  plan: 'message-id' | 'state-index' | 'bounded-scan';
  scannedUpTo: string | null;
}

// `scan` (rows a bounded scan examines) has no field: it is kept from the URL (`&scan=1000`).
const FILTERS = ['id', 'key', 'name', 'state', 'time', 'since', 'until', 'path', 'value', 'pathIn', 'scan'] as const;
const STATES: Record<Component, string[]> = {
  outbox: ['pending', 'processing', 'sent', 'dead'],
  inbox: ['pending', 'processing', 'processed', 'dead'],
};
const PLAN: Record<Page['plan'], string> = {
  'message-id': 'found through the message id index',
  'state-index': 'found through the index of that state',
  'bounded-scan': 'found by a bounded scan of the newest rows',
};

export async function messages(ctx: ViewContext): Promise<void> {
  const component: Component = ctx.params.get('component') === 'inbox' ? 'inbox' : 'outbox';
  const filter: Record<string, string> = {};
  for (const f of FILTERS) {
    const value = ctx.params.get(f);
    if (value) filter[f] = value;
  }
  const after = ctx.params.get('after') ?? '';
  const input = (name: string, text: string, attributes: Record<string, string> = {}) =>
    h(
      'label',
      null,
      h('span', null, text),
      h('input', {
        name,
        type: 'search',
        autocomplete: 'off',
        ...attributes,
        value: attributes.type === 'datetime-local' ? toLocal(filter[name] ?? null) : (filter[name] ?? ''),
      }),
    );
  const choice = (name: string, text: string, options: [string, string][]) =>
    h(
      'label',
      null,
      h('span', null, text),
      h(
        'select',
        { name },
        options.map(([value, label]) => h('option', { value, selected: (filter[name] ?? '') === value }, label)),
      ),
    );
  const isOutbox = component === 'outbox';
  const form = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Find messages' },
    input('id', isOutbox ? 'Message id' : 'Idempotency key', { size: '20' }),
    input('key', isOutbox ? 'Key' : 'Aggregate'),
    input('name', isOutbox ? 'Destination' : 'Source'),
    choice('state', 'State', [['', 'any'], ...STATES[component].map((s): [string, string] => [s, s])]),
    choice('time', 'Time is', [
      ['', isOutbox ? 'enqueued' : 'received'],
      ['finished', isOutbox ? 'sent' : 'processed'],
    ]),
    input('since', `From (${BROWSER_ZONE})`, { type: 'datetime-local' }),
    input('until', `Before (${BROWSER_ZONE})`, { type: 'datetime-local' }),
    choice('pathIn', 'Path in', [
      ['', 'payload'],
      ['headers', 'headers'],
    ]),
    input('path', 'Path (order.id)', { pattern: '[A-Za-z0-9_\\-]+(\\.[A-Za-z0-9_\\-]+)*' }),
    input('value', 'equals'),
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Search'), h('button', { type: 'reset' }, 'Clear')),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = new URLSearchParams({ component });
    for (const f of FILTERS) {
      const raw = String(data.get(f) ?? filter[f] ?? '').trim();
      const value = f === 'since' || f === 'until' ? toIso(raw) : raw;
      if (value) next.set(f, value);
    }
    ctx.go(`messages?${next}`);
  });
  form.addEventListener('reset', (event) => {
    event.preventDefault();
    ctx.go(`messages?component=${component}`);
  });
  const results = h('div', { class: 'results' }, h('p', { class: 'loading' }, 'Loading…'));
  mount(
    ctx.main,
    heading('Messages', componentTabs(ctx, 'messages', component, filter)),
    h(
      'p',
      { class: 'hint' },
      `Every state, newest first. Dates you type are in your browser's time zone (${BROWSER_ZONE}); dates shown are UTC. A message id, or a state of pending, processing or dead, is found through an index; any other search looks at the newest rows from where it stands, at most 100,000 per page, and says how far it looked.`,
    ),
    form,
    results,
  );

  const page = await get<Page>(api(ctx, 'messages'), { component, ...filter, after, limit: 50 });
  const base = `#/${encodeURIComponent(ctx.instance)}/messages?`;
  const rows = page.rows.map((r) =>
    h(
      'tr',
      { class: r.state === 'dead' ? 'dead-row' : null },
      h('td', null, h('a', { href: `#/${encodeURIComponent(ctx.instance)}/messages/${component}/${r.id}` }, r.id)),
      h('td', null, h('code', null, (isOutbox ? r.messageId : r.idempotencyKey) ?? '—')),
      h('td', null, r.name),
      h('td', null, r.key ?? '—'),
      h('td', null, h('span', { class: `state ${r.state}` }, r.state)),
      h('td', { class: 'num' }, r.attempts),
      h('td', { class: 'time' }, time(r.createdAt)),
      h('td', { class: 'time' }, time(r.finishedAt)),
      h('td', null, errorText(r.lastError, 80)),
    ),
  );
  const list = table(
    [
      'Id',
      isOutbox ? 'Message id' : 'Idempotency key',
      isOutbox ? 'Destination' : 'Source',
      isOutbox ? 'Key' : 'Aggregate',
      'State',
      'Attempts',
      `${isOutbox ? 'Enqueued' : 'Received'} (UTC)`,
      `${isOutbox ? 'Sent' : 'Processed'} (UTC)`,
      'Last error',
    ],
    rows,
    'No messages match this search in the rows looked at.',
    `${page.rows.length} shown, newest first; ${PLAN[page.plan]}`,
  );
  const scanned =
    page.scannedUpTo !== null
      ? h(
          'p',
          { class: 'notice', id: 'scanned', role: 'note' },
          `Scanned up to row ${page.scannedUpTo}: older rows were not looked at yet. `,
          h('a', { href: `${base}${new URLSearchParams({ component, ...filter, after: page.next ?? '' })}` }, 'Look further'),
        )
      : null;
  const paging = h(
    'nav',
    { class: 'paging', 'aria-label': 'Pages' },
    after ? h('a', { href: `${base}${new URLSearchParams({ component, ...filter })}` }, 'Newest') : null,
    page.next && page.scannedUpTo === null
      ? h('a', { href: `${base}${new URLSearchParams({ component, ...filter, after: page.next })}` }, 'Older')
      : null,
  );
  mount(results, scanned, list, paging);
}

export async function message(ctx: ViewContext, component: Component, id: string): Promise<void> {
  const r = await get<MessageRow>(api(ctx, `messages/${component}/${encodeURIComponent(id)}`));
  const isOutbox = component === 'outbox';
  const fields: [string, Child][] = [
    ['Component', component],
    ['State', h('span', { class: `state ${r.state}` }, r.state)],
    [isOutbox ? 'Destination' : 'Source', r.name],
    [isOutbox ? 'Key' : 'Aggregate', r.key ?? '—'],
    isOutbox ? ['Message id', h('code', null, r.messageId ?? '—')] : ['Idempotency key', h('code', null, r.idempotencyKey ?? '—')],
    ['Attempts', r.attempts],
    [`${isOutbox ? 'Enqueued' : 'Received'} (UTC)`, time(r.createdAt)],
    ['Due (UTC)', time(r.availableAt)],
    ['Last claimed (UTC)', time(r.claimedAt)],
    [`${isOutbox ? 'Sent' : 'Processed'} (UTC)`, time(r.finishedAt)],
    ['Trace id', r.traceId ? h('code', null, r.traceId) : '—'],
  ];
  const headers = h(
    'table',
    null,
    h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Header'), h('th', { scope: 'col' }, 'Value'))),
    h(
      'tbody',
      null,
      Object.entries(r.headers).map(([k, v]) =>
        h('tr', null, h('th', { scope: 'row' }, h('code', null, k)), h('td', null, h('code', null, v))),
      ),
    ),
  );
  mount(
    ctx.main,
    heading(
      `Message ${id}`,
      h('a', { href: `#/${encodeURIComponent(ctx.instance)}/messages?component=${component}`, class: 'back' }, '← Messages'),
    ),
    r.state === 'dead'
      ? h(
          'p',
          { class: 'notice' },
          'This message is dead: ',
          h('a', { href: `#/${encodeURIComponent(ctx.instance)}/dead/${component}/${id}` }, 'open it as a dead letter'),
          ' to replay or discard it.',
        )
      : null,
    h(
      'dl',
      { class: 'fields' },
      fields.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]),
    ),
    h('h2', null, 'Last error'),
    h('pre', { class: 'error-block' }, r.lastError ?? '—'),
    h('h2', null, 'Payload'),
    h('pre', { class: 'code', tabindex: '0' }, JSON.stringify(r.payload, null, 2)),
    h('h2', null, 'Headers'),
    Object.keys(r.headers).length === 0 ? h('p', { class: 'empty' }, 'No headers.') : h('div', { class: 'table-wrap' }, sortable(headers)),
  );
}
