// The dashboard's shell: the header (instance switch, views), the hash router, the status line
// and the confirmation dialog. Views live in views.ts; everything they show comes from the API.
import { ApiError, session as loadSession, type Session } from './api.js';
import { h, mount } from './dom.js';
import { deadLetterGroups } from './failures.js';
import { message, messages } from './messages.js';
import type { ViewContext } from './view-parts.js';
import { blocked, claims, deadLetter, deadLetters, heartbeats, overview } from './views.js';
import { warnings } from './warnings.js';

const VIEWS = [
  ['overview', 'Overview'],
  ['messages', 'Messages'],
  ['dead', 'Dead letters'],
  ['groups', 'Dead-letter groups'],
  ['blocked', 'Blocked'],
  ['claims', 'Claims in flight'],
  ['heartbeats', 'Instances'],
  ['warnings', 'Database'],
] as const;

let timers: number[] = [];
/** Set when a view navigates after an action, so the result it announced stays on screen. */
let keepStatus = false;

function route(session: Session): { instance: string; view: string; rest: string[]; params: URLSearchParams } {
  const [path, query = ''] = location.hash.replace(/^#\/?/, '').split('?');
  const [instance, view = 'overview', ...rest] = path.split('/').map(decodeURIComponent);
  const known = session.instances.some((i) => i.name === instance);
  return {
    instance: known ? instance : session.instances[0].name,
    view: known ? view : 'overview',
    rest: known ? rest : [],
    params: new URLSearchParams(query),
  };
}

function dialog(): ViewContext['confirm'] {
  const title = h('h2', { id: 'confirm-title' });
  const text = h('p', { id: 'confirm-text' });
  const reasonInput = h('input', { name: 'reason', type: 'text', maxlength: '500', autocomplete: 'off' });
  const reason = h('label', { class: 'reason' }, h('span', null, 'Reason (logged)'), reasonInput);
  const ok = h('button', { type: 'submit', value: 'ok', class: 'primary' });
  const cancel = h('button', { type: 'submit', value: 'cancel', formnovalidate: true }, 'Cancel');
  const box = h(
    'dialog',
    { 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text' },
    h('form', { method: 'dialog' }, title, text, reason, h('div', { class: 'buttons' }, cancel, ok)),
  );
  document.body.append(box);
  return (p) =>
    new Promise((resolve) => {
      title.textContent = p.title;
      text.textContent = p.text;
      ok.textContent = p.action;
      ok.className = p.danger ? 'danger' : 'primary';
      reason.hidden = !p.reason;
      reasonInput.value = '';
      box.returnValue = 'cancel';
      box.addEventListener('close', () => resolve(box.returnValue === 'ok' ? reasonInput.value.trim() : null), { once: true });
      box.showModal();
      cancel.focus(); // the safe choice has the focus: Enter alone never changes anything
    });
}

async function start(): Promise<void> {
  const app = document.getElementById('app') as HTMLElement;
  let session: Session;
  try {
    session = await loadSession();
  } catch (error) {
    mount(app, h('main', { id: 'main' }, h('h1', null, 'QueueBox'), h('p', { class: 'status error' }, (error as Error).message)));
    return;
  }
  const status = h('p', { class: 'status', role: 'status', 'aria-live': 'polite' });
  const main = h('main', { id: 'main', tabindex: '-1' });
  const nav = h('nav', { class: 'views', 'aria-label': 'Views' });
  const switcher = h(
    'select',
    { id: 'instance', 'aria-label': 'QueueBox instance' },
    session.instances.map((i) => h('option', { value: i.name }, i.name)),
  );
  switcher.addEventListener('change', () => {
    location.hash = `#/${encodeURIComponent(switcher.value)}/${route(session).view}`;
  });
  const confirm = dialog();
  mount(
    app,
    h(
      'header',
      null,
      h('a', { class: 'brand', href: '#/' }, 'QueueBox'),
      session.instances.length > 1 ? h('label', { class: 'switch' }, h('span', null, 'Instance'), switcher) : null,
      nav,
      h('span', { class: 'who' }, session.readOnly ? h('span', { class: 'badge' }, 'read-only') : null, ' ', session.actor),
    ),
    status,
    main,
  );

  const say = (message: string, kind: 'ok' | 'error' = 'ok') => {
    status.textContent = message;
    status.className = `status ${kind}`;
  };

  const show = async () => {
    for (const timer of timers) clearInterval(timer);
    timers = [];
    const { instance, view, rest, params } = route(session);
    switcher.value = instance;
    mount(
      nav,
      VIEWS.map(([id, label]) =>
        h('a', { href: `#/${encodeURIComponent(instance)}/${id}`, 'aria-current': id === view ? 'page' : null }, label),
      ),
    );
    const ctx: ViewContext = {
      session,
      instance,
      params,
      main,
      say,
      confirm,
      go: (next) => {
        keepStatus = true;
        location.hash = `#/${encodeURIComponent(instance)}/${next}`;
      },
      every: (ms, refresh) => {
        const timer = window.setInterval(() => {
          if (document.visibilityState === 'visible') refresh().catch((error) => say((error as Error).message, 'error'));
        }, ms);
        timers.push(timer);
      },
    };
    try {
      if (view === 'dead' && rest.length === 2) await deadLetter(ctx, rest[0] === 'inbox' ? 'inbox' : 'outbox', rest[1]);
      else if (view === 'dead') await deadLetters(ctx);
      else if (view === 'messages' && rest.length === 2) await message(ctx, rest[0] === 'inbox' ? 'inbox' : 'outbox', rest[1]);
      else if (view === 'messages') await messages(ctx);
      else if (view === 'groups') await deadLetterGroups(ctx);
      else if (view === 'blocked') await blocked(ctx);
      else if (view === 'claims') await claims(ctx);
      else if (view === 'heartbeats') await heartbeats(ctx);
      else if (view === 'warnings') await warnings(ctx);
      else await overview(ctx);
    } catch (error) {
      const text = error instanceof ApiError ? `${error.message} (HTTP ${error.status})` : (error as Error).message;
      mount(main, h('h1', { tabindex: '-1' }, 'Something went wrong'), h('p', { class: 'status error' }, text));
    }
    // The new view's title takes the focus (screen readers announce it), unless the user already
    // moved into the view while its rows loaded: the search box they type in keeps it.
    if (!main.contains(document.activeElement)) document.getElementById('view-title')?.focus({ preventScroll: true });
  };
  let previous = '';
  window.addEventListener('hashchange', () => {
    // A new view clears the last result; the same view drawn again (after an action) keeps it.
    const now = location.hash.split('?')[0];
    if (now !== previous && !keepStatus) say('');
    keepStatus = false;
    previous = now;
    void show();
  });
  previous = location.hash.split('?')[0];
  await show();
}

void start();
