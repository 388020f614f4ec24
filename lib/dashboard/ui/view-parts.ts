// What every view draws with: the shell's context, the heading, the outbox / inbox switch, the
// sortable table, and the forms' dates. Its own module so the views (views.ts) and the views of
// their own files (failures.ts, messages.ts, pauses.ts, warnings.ts) share it without importing
// each other.

import { post, type Session } from './api.js';
import { type Child, h, plural } from './dom.js';
import { sortable } from './sort.js';

export type Component = 'outbox' | 'inbox';

/** What a view gets from the shell: where it draws, the session, and the shell's shared pieces. */
export interface ViewContext {
  session: Session;
  instance: string;
  params: URLSearchParams;
  main: HTMLElement;
  /** Announces a result in the status line (a polite live region). */
  say(message: string, kind?: 'ok' | 'error'): void;
  /** Opens the confirmation dialog; resolves to the reason typed (or '') when confirmed, null when cancelled. */
  confirm(p: { title: string; text: string; action: string; danger?: boolean; reason?: boolean }): Promise<string | null>;
  /** Goes to another view of this instance (`dead?component=inbox`). */
  go(view: string): void;
  /** Calls `refresh` every few seconds while this view is shown. */
  every(ms: number, refresh: () => Promise<void>): void;
}

export const api = (ctx: ViewContext, path: string) => `${encodeURIComponent(ctx.instance)}/${path}`;

/**
 * A replay or discard of `count` dead letters (`what` names them) behind the count confirmation:
 * sends `selection` once confirmed, says how many changed and redraws the view with `redraw`, or
 * says the error. The dead-letter list and the dead-letter groups act through it.
 */
export async function changeDeadLetters(
  ctx: ViewContext,
  action: 'replay' | 'discard',
  count: number,
  what: string,
  selection: object,
  redraw: () => Promise<void>,
): Promise<void> {
  const confirmed = await ctx.confirm({
    title: action === 'replay' ? `Replay ${plural(count, 'message')}?` : `Discard ${plural(count, 'message')}?`,
    text:
      action === 'replay'
        ? `${what} will be sent again: back to pending, attempts reset, due now (same message id).`
        : `${what} will be deleted for good. This cannot be undone.`,
    action: `${action === 'replay' ? 'Replay' : 'Discard'} ${count.toLocaleString('en')}`,
    danger: action === 'discard',
  });
  if (confirmed === null) return;
  try {
    const { changed } = await post<{ changed: number }>(ctx.session, api(ctx, `dead-letters/${action}`), selection);
    ctx.say(`${action === 'replay' ? 'Replayed' : 'Discarded'} ${plural(changed, 'message')}.`);
    await redraw();
  } catch (error) {
    ctx.say((error as Error).message, 'error');
  }
}

export function heading(text: string, ...extra: Child[]): HTMLElement {
  return h('div', { class: 'heading' }, h('h1', { tabindex: '-1', id: 'view-title' }, text), ...extra);
}

/** The outbox / inbox switch of a view, as two links (keyboard: Tab and Enter). */
export function componentTabs(ctx: ViewContext, view: string, current: Component, keep: Record<string, string> = {}): HTMLElement {
  return h(
    'nav',
    { class: 'tabs', 'aria-label': 'Table' },
    (['outbox', 'inbox'] as const).map((c) =>
      h(
        'a',
        {
          href: `#/${encodeURIComponent(ctx.instance)}/${view}?${new URLSearchParams({ ...keep, component: c })}`,
          'aria-current': c === current ? 'page' : null,
        },
        c === 'outbox' ? 'Outbox' : 'Inbox',
      ),
    ),
  );
}

/** The browser's time zone, as the page names it where a date is read in it (`datetime-local` filters). */
export const BROWSER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';

export function table(headers: string[], rows: Node[], empty: string, caption?: string, className?: string): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'empty' }, empty);
  return h(
    'div',
    { class: `table-wrap${className ? ` ${className}` : ''}` },
    sortable(
      h(
        'table',
        null,
        caption ? h('caption', null, caption) : null,
        h(
          'thead',
          null,
          h(
            'tr',
            null,
            headers.map((t) => h('th', { scope: 'col' }, t)),
          ),
        ),
        h('tbody', null, rows),
      ),
    ),
  );
}

export function errorText(text: string | null, max = 140): Child {
  if (!text) return '—';
  return h('span', { class: 'error-text', title: text }, text.length > max ? `${text.slice(0, max)}…` : text);
}

/** `datetime-local` inputs hold local time without a zone; the API takes ISO 8601 instants. */
export const toIso = (local: string) => (local ? new Date(local).toISOString() : '');
export const toLocal = (iso: string | null) => {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
};
