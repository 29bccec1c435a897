// The leased console: the leases under a prefix, one lease live, revoke. Plain JavaScript with no
// dependencies, served by the binary under a strict Content-Security-Policy. Every value from the
// server (holder names above all: any client picks its own) reaches the page as a text node or an
// attribute set through the DOM, never as markup.
'use strict';

const TOKEN_KEY = 'leased.console.token';
// The timeline spans the time since the view opened, from one minute up to five.
const TIMELINE_MIN_MS = 60 * 1000;
const TIMELINE_MAX_MS = 5 * 60 * 1000;
const TIMELINE_ROWS = 8;
const EVENTS_KEPT = 200;
const SVG = 'http://www.w3.org/2000/svg';

const $ = (id) => document.getElementById(id);

// --- talking to the server -------------------------------------------------------------------

let session = null;

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: 'Bearer ' + token } : {};
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? `${body.code}: ${body.message}` : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { ...authHeaders(), ...(options.headers || {}) },
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401) showLogin(body ? `${body.code}: ${body.message}` : 'HTTP 401');
    throw new ApiError(response.status, body);
  }
  return body;
}

function query(params) {
  return new URLSearchParams(params).toString();
}

// --- building the page from text -------------------------------------------------------------

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function svgElement(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function duration(ms) {
  if (ms <= 0) return 'expired';
  if (ms < 10000) return (ms / 1000).toFixed(1) + ' s';
  if (ms < 120000) return Math.round(ms / 1000) + ' s';
  if (ms < 7200000) return Math.round(ms / 60000) + ' min';
  return Math.round(ms / 3600000) + ' h';
}

// Remaining times count down from when the server said them, on this browser's monotonic clock,
// so that a skewed wall clock does not matter.
function remaining(holder, receivedAt) {
  return holder.remaining_ms - (performance.now() - receivedAt);
}

function showBanner(message) {
  $('banner').textContent = message || '';
  $('banner').hidden = !message;
}

function showOnly(view) {
  for (const id of ['login-view', 'list-view', 'lease-view']) $(id).hidden = id !== view;
}

// --- access ----------------------------------------------------------------------------------

function showLogin(message) {
  stopWatching();
  session = null;
  showOnly('login-view');
  $('login-error').textContent = message || '';
  $('forget-token').hidden = !sessionStorage.getItem(TOKEN_KEY);
  $('token').focus();
}

async function loadSession() {
  session = await api('/api/session');
  $('who').textContent = session.access_control
    ? `token of ${session.client}: ${session.operations.join(', ')} under ${session.prefixes.map((p) => p || '(every name)').join(', ')}`
    : 'access control off';
  $('forget-token').hidden = !session.access_control;
}

$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
  $('token').value = '';
  await route();
});

$('forget-token').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin('');
});

// --- the list --------------------------------------------------------------------------------

const list = { prefix: '', pages: [''], page: 0, debounce: null, generation: 0 };

async function loadList() {
  const generation = ++list.generation;
  $('list-status').textContent = 'loading…';
  const started = performance.now();
  try {
    const page = await api('/api/leases?' + query({
      prefix: list.prefix,
      page_size: $('page-size').value,
      page_token: list.pages[list.page],
    }));
    // A newer keystroke's answer wins, whichever arrives first.
    if (generation !== list.generation) return;
    renderList(page, performance.now());
    list.pages.length = list.page + 1;
    if (page.next_page_token) list.pages.push(page.next_page_token);
    $('previous-page').disabled = list.page === 0;
    $('next-page').disabled = !page.next_page_token;
    $('page-number').textContent = `page ${list.page + 1}`;
    $('list-status').textContent =
      `${page.leases.length} held${page.next_page_token ? ' (more on the next page)' : ''}, ` +
      `${Math.round(performance.now() - started)} ms`;
    document.body.dataset.listed = String(page.leases.length);
    showBanner('');
  } catch (error) {
    if (generation !== list.generation) return;
    $('list-status').textContent = '';
    if (error.status !== 401) showBanner(error.message);
  }
}

function renderList(page, receivedAt) {
  const rows = page.leases.map((lease) => {
    const row = element('tr');
    const link = element('a', lease.name);
    link.href = '#lease=' + encodeURIComponent(lease.name);
    const name = element('td', null, 'name');
    name.append(link);
    const soonest = Math.min(...lease.holders.map((holder) => remaining(holder, receivedAt)));
    row.append(
      name,
      element('td', lease.limit > 1 ? `${lease.mode} (${lease.holders.length}/${lease.limit})` : lease.mode),
      element('td', lease.holders.map((holder) => holder.holder).join(', ')),
      element('td', lease.holders.map((holder) => holder.fencing_token).join(', '), 'number'),
      element('td', lease.holders.length ? duration(soonest) : '', 'number'),
      element('td', lease.waiters, 'number'),
    );
    return row;
  });
  if (!rows.length) {
    const empty = element('td', list.prefix ? `No lease held under “${list.prefix}”.` : 'No lease held.', 'free');
    empty.colSpan = 6;
    const row = element('tr');
    row.append(empty);
    rows.push(row);
  }
  $('leases').tBodies[0].replaceChildren(...rows);
}

$('prefix').addEventListener('input', () => {
  clearTimeout(list.debounce);
  list.debounce = setTimeout(() => {
    list.prefix = $('prefix').value;
    list.pages = [''];
    list.page = 0;
    history.replaceState(null, '', list.prefix ? '#prefix=' + encodeURIComponent(list.prefix) : '#');
    loadList();
  }, 150);
});
$('page-size').addEventListener('change', () => {
  list.pages = [''];
  list.page = 0;
  loadList();
});
$('next-page').addEventListener('click', () => {
  list.page += 1;
  loadList();
});
$('previous-page').addEventListener('click', () => {
  list.page = Math.max(0, list.page - 1);
  loadList();
});

// --- one lease, live -------------------------------------------------------------------------

// What the lease view knows: the holders as last heard, when they were heard (for countdowns),
// the timeline's segments, and the events seen since the view opened.
let view = null;

function stopWatching() {
  if (view) {
    view.closed = true;
    view.abort.abort();
    clearInterval(view.ticker);
  }
  view = null;
}

async function openLease(name) {
  stopWatching();
  showOnly('lease-view');
  view = {
    name,
    holders: [],
    receivedAt: performance.now(),
    openedAt: Date.now(),
    segments: [],
    events: 0,
    abort: new AbortController(),
    closed: false,
    renderPending: false,
    mayRevoke: false,
    waiters: 0,
    waitersPending: false,
    lease: null,
  };
  $('lease-name').textContent = name;
  $('events').replaceChildren();
  $('revoke-result').textContent = '';
  document.body.dataset.events = '0';
  const current = view;
  try {
    const lease = await api('/api/lease?' + query({ name }));
    if (current.closed) return;
    current.mayRevoke = lease.may_revoke;
    current.waiters = lease.waiters;
    applyHolders(current, lease, 'snapshot');
  } catch (error) {
    if (error.status !== 401) showBanner(error.message);
    return;
  }
  current.ticker = setInterval(() => scheduleRender(current), 1000);
  watch(current);
}

// Follows the lease's Watch stream (server-sent events over fetch, since EventSource cannot send
// the bearer token), and reconnects after a pause when it ends: each connection starts with a
// snapshot, so nothing is lost across a reconnect but the events in between.
async function watch(current) {
  let pause = 500;
  while (!current.closed) {
    try {
      const response = await fetch('/api/watch?' + query({ name: current.name }), {
        headers: authHeaders(),
        signal: current.abort.signal,
      });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        throw new ApiError(response.status, body);
      }
      setLive(current, 'live');
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          serverEvent(current, block);
        }
        pause = 500;
      }
    } catch (error) {
      if (current.closed) return;
      if (error.status === 401) {
        showLogin(error.message);
        return;
      }
      setLive(current, 'reconnecting: ' + error.message);
    }
    if (current.closed) return;
    setLive(current, 'reconnecting…');
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 10000);
  }
}

function setLive(current, text) {
  if (current === view) {
    $('live').textContent = text === 'live' ? '● live' : text;
    $('live').className = text === 'live' ? 'live' : 'muted';
  }
}

// One server-sent event: `data:` lines carry a Watch event, `event: error` an error, and lines
// starting with `:` are the server's heartbeat.
function serverEvent(current, block) {
  let kind = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event:')) kind = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return;
  const payload = JSON.parse(data.join('\n'));
  if (kind === 'error') {
    setLive(current, `stream ended: ${payload.code}: ${payload.message}`);
    return;
  }
  current.events += 1;
  document.body.dataset.events = String(current.events);
  applyHolders(current, payload, payload.cause);
  logEvent(payload);
  refreshWaiters(current);
}

// Watch events carry the holders, not the queue: the number waiting is read again with Describe,
// at most once a second while events come.
function refreshWaiters(current) {
  if (current.waitersPending) return;
  current.waitersPending = true;
  setTimeout(async () => {
    try {
      const lease = await api('/api/lease?' + query({ name: current.name }));
      current.waiters = lease.waiters;
      current.mayRevoke = lease.may_revoke;
      scheduleRender(current);
    } catch (error) {
      // The next event tries again; the stream reports what is wrong.
    } finally {
      current.waitersPending = false;
    }
  }, 1000);
}

// The lease's holders changed (or were read afresh): end the timeline segments of grants that are
// gone, start segments for new ones.
function applyHolders(current, lease, cause) {
  const now = Date.now();
  const tokens = new Set(lease.holders.map((holder) => holder.fencing_token));
  for (const segment of current.segments) {
    if (segment.end === null && !tokens.has(segment.token)) {
      segment.end = now;
      segment.endCause = cause === 'snapshot' || cause === 'granted' ? 'ended' : cause;
    }
  }
  const open = new Set(current.segments.filter((s) => s.end === null).map((s) => s.token));
  for (const holder of lease.holders) {
    if (open.has(holder.fencing_token)) continue;
    // A grant already there when the view opened started before it: drawn from the left edge.
    const before = current.segments.length === 0 && cause === 'snapshot';
    current.segments.push({
      holder: holder.holder,
      token: holder.fencing_token,
      shared: holder.shared,
      start: before ? null : now,
      end: null,
      endCause: null,
    });
  }
  current.lease = lease;
  current.holders = lease.holders;
  current.receivedAt = performance.now();
  scheduleRender(current);
}

function logEvent(event) {
  const item = element('li');
  const time = new Date().toLocaleTimeString();
  const who = event.holders.map((holder) => `${holder.holder} #${holder.fencing_token}`).join(', ');
  item.append(
    element('span', time + ' ', 'muted'),
    element('span', event.cause, 'cause'),
    document.createTextNode(' ' + (who || 'free') + (event.reason ? ` (reason: ${event.reason})` : '')),
  );
  const events = $('events');
  events.prepend(item);
  while (events.children.length > EVENTS_KEPT) events.lastElementChild.remove();
}

// Events may come hundreds a second; the page redraws at most every 50 ms.
function scheduleRender(current) {
  if (current.renderPending || current !== view) return;
  current.renderPending = true;
  setTimeout(() => {
    current.renderPending = false;
    if (current === view) renderLease(current);
  }, 50);
}

function renderLease(current) {
  const lease = current.lease;
  if (!lease) return;
  const holders = current.holders;
  const limit = lease.limit > 1 ? `, ${holders.length} of ${lease.limit} permits held` : '';
  const waiters = `, ${current.waiters} waiting`;
  $('lease-summary').textContent = holders.length
    ? `${lease.mode}${limit}${waiters}`
    : `free${waiters}`;
  const rows = holders.map((holder) => {
    const row = element('tr');
    row.append(
      element('td', holder.holder),
      element('td', holder.fencing_token, 'number'),
      element('td', holder.shared ? 'shared' : lease.limit > 1 ? 'counting' : 'exclusive'),
      element('td', duration(remaining(holder, current.receivedAt)), 'number'),
    );
    return row;
  });
  if (!rows.length) {
    const free = element('td', 'Nobody holds this lease.', 'free');
    free.colSpan = 4;
    const row = element('tr');
    row.append(free);
    rows.push(row);
  }
  $('holders').tBodies[0].replaceChildren(...rows);
  renderRevoke(current);
  renderTimeline(current);
}

// The timeline: one row per holder name (the most recent ones), a bar per grant, and a mark where
// it ended: red when it expired, orange when revoked, grey when released.
function renderTimeline(current) {
  const now = Date.now();
  const span = Math.min(TIMELINE_MAX_MS, Math.max(TIMELINE_MIN_MS, (now - current.openedAt) * 1.1));
  const from = now - span;
  current.segments = current.segments.filter((s) => s.end === null || s.end > from);
  const names = [];
  for (const segment of [...current.segments].reverse()) {
    if (!names.includes(segment.holder)) names.push(segment.holder);
  }
  names.length = Math.min(names.length, TIMELINE_ROWS);
  names.reverse();
  const left = 220;
  const width = 1000 - left - 10;
  const rowHeight = 22;
  const height = 24 + Math.max(names.length, 1) * rowHeight;
  const x = (time) => left + Math.max(0, (time - from) / span) * width;
  const svg = $('timeline');
  svg.setAttribute('viewBox', `0 0 1000 ${height}`);
  const nodes = [];
  for (let tick = 0; tick <= 5; tick++) {
    const at = left + (tick / 5) * width;
    const ago = ((5 - tick) / 5) * span;
    const label = tick === 5 ? 'now' : ago < 120000 ? `−${Math.round(ago / 1000)} s` : `−${(ago / 60000).toFixed(1)} min`;
    nodes.push(svgElement('line', { x1: at, x2: at, y1: 0, y2: height - 16, class: 'grid' }));
    nodes.push(svgElement('text', { x: at, y: height - 4, 'text-anchor': tick === 5 ? 'end' : 'middle', class: 'axis' }, label));
  }
  names.forEach((name, index) => {
    const y = 4 + index * rowHeight;
    // Long names keep both ends: hosts and pods differ at the end.
    const label = name.length > 32 ? name.slice(0, 14) + '…' + name.slice(-16) : name;
    nodes.push(svgElement('text', { x: 4, y: y + 14, class: 'row-label' }, label));
    for (const segment of current.segments.filter((s) => s.holder === name)) {
      const start = segment.start === null ? from : Math.max(segment.start, from);
      const end = segment.end === null ? now : segment.end;
      const classes = ['segment', segment.shared ? 'shared' : '', segment.start === null ? 'open' : '']
        .filter(Boolean).join(' ');
      const bar = svgElement('rect', {
        x: x(start), y, width: Math.max(2, x(end) - x(start)), height: rowHeight - 6, class: classes,
      });
      bar.append(svgElement('title', {},
        `${segment.holder} #${segment.token}` + (segment.endCause ? ` (${segment.endCause})` : ' (holding)')));
      nodes.push(bar);
      if (segment.endCause) {
        nodes.push(svgElement('rect', {
          x: x(end) - 2, y: y - 2, width: 4, height: rowHeight - 2, class: 'end-' + segment.endCause,
        }));
      }
    }
  });
  svg.replaceChildren(...nodes);
}

// --- revoke ----------------------------------------------------------------------------------

function renderRevoke(current) {
  const form = $('revoke-form');
  form.hidden = !current.mayRevoke || current.holders.length === 0;
  if (form.hidden) return;
  const select = $('revoke-token');
  const wanted = ['', ...current.holders.map((holder) => holder.fencing_token)];
  const have = [...select.options].map((option) => option.value);
  if (wanted.join(',') === have.join(',')) return;
  const chosen = select.value;
  const options = [new Option('every holder', '')];
  for (const holder of current.holders) {
    options.push(new Option(`${holder.holder} #${holder.fencing_token}`, holder.fencing_token));
  }
  select.replaceChildren(...options);
  if (wanted.includes(chosen)) select.value = chosen;
}

$('revoke-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  if (!view) return;
  const current = view;
  $('revoke-result').textContent = 'revoking…';
  try {
    const answer = await api('/api/revoke', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        name: current.name,
        reason: $('revoke-reason').value,
        fencing_token: $('revoke-token').value,
      }),
    });
    $('revoke-result').textContent = answer.revoked
      ? `revoked (token ${answer.fencing_token})`
      : 'nothing revoked: that grant had already ended';
    $('revoke-reason').value = '';
  } catch (error) {
    $('revoke-result').textContent = error.message;
  }
});

// --- routing: #prefix=… is the list, #lease=… one lease --------------------------------------

async function route() {
  const hash = new URLSearchParams(location.hash.slice(1));
  try {
    if (!session) await loadSession();
  } catch (error) {
    if (error.status !== 401) showBanner(error.message);
    return;
  }
  if (hash.has('lease')) {
    await openLease(hash.get('lease'));
    return;
  }
  stopWatching();
  showOnly('list-view');
  list.prefix = hash.get('prefix') || '';
  $('prefix').value = list.prefix;
  list.pages = [''];
  list.page = 0;
  await loadList();
}

window.addEventListener('hashchange', route);
route();
